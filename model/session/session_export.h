// memscope-cli export: a session merged into one safetensors file, or its scalar series as CSV
// (DESIGN "Sessions"). Both walk one timeline in step order, as the engine left it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <limits>

#include "model/session/session_reader.h"

namespace memscope::model {

struct ExportRange {
  int timeline = 0;
  int64_t from = 0;  // first step kept
  int64_t to = std::numeric_limits<int64_t>::max();
};

struct ExportResult {
  int64_t frames = 0;
  uint64_t bytes = 0;  // of the file written
};

// One file in the chunk layout of frame_chunk.h (every tensor with a leading step axis), plus
// __metadata__ "session" (session.json) and "events" (the timeline's events as a JSON array).
// Throws UserError when the probe layout changes inside the range (a restart knob changed the
// model's shape): the message names the step, to export the parts separately with the range.
ExportResult export_safetensors(const SessionReader& session, const std::filesystem::path& out, const ExportRange& range = {});

// One row per frame and one column per scalar series: the outer numbers, then
// layer{L}/head{H}/{metric} for every probe. Empty cells are "not measured". Written row by row.
ExportResult export_csv(const SessionReader& session, const std::filesystem::path& out, const ExportRange& range = {});

}  // namespace memscope::model
