// session.json (DESIGN "Sessions"): what a recording is of. Written when the recording starts and
// rewritten (atomically) when it closes with the totals; a session whose json still says
// "closed": false was not stopped cleanly (a killed process, a full disk).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "model/config/preset.h"
#include "model/session/record_config.h"

namespace memscope::model {

inline constexpr const char* kSessionFormat = "memscope-session";
inline constexpr int kSessionVersion = 1;

struct SessionInfo {
  int version = kSessionVersion;
  std::string memscope_version;
  std::string created;  // UTC, ISO 8601
  std::string device;   // e.g. "cpu (LibTorch 1.13.1, threads 2)"
  std::string preset_name;
  std::string preset_toml;  // the resolved preset: parse_preset gives the run's knobs back
  std::map<std::string, std::string> knobs;  // every registered knob as a TOML literal (what --set takes)
  // Model shape.
  std::string block, structure;
  int64_t layers = 0, memory_heads = 0, d_model = 0, vocab = 0;
  RecordConfig record;
  int64_t world_size = 1;  // ranks of a data-parallel run (rank 0 records); absent before issue 21
  // Totals, written at close.
  bool closed = false;
  int64_t frames = 0, chunks = 0, events = 0;
  std::map<int, int64_t> last_step;  // per timeline
};

// `vocab` is the task's (the preset leaves it to the task).
SessionInfo session_info_for(const Preset& preset, const std::string& device, int64_t vocab);
std::string session_info_json(const SessionInfo& info);  // pretty, ends with a newline
// Throws UserError naming `where` and the field for anything malformed.
SessionInfo parse_session_info(const std::string& text, const std::string& where);

}  // namespace memscope::model
