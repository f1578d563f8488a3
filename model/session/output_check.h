// Output paths are checked before any work starts (issue 17): a run must never compute for an
// hour and then find that its --out cannot be written, and no command may overwrite its own input
// or a file of another kind unless the user says --force.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace memscope::model {

// What a file holds, sniffed from its content (safetensors metadata) or, for text, its name.
enum class FileKind { Missing, Directory, Session, Checkpoint, SessionExport, FrameChunk, MemoryTrace, Safetensors, Preset, Csv, Other };
const char* describe(FileKind kind);  // "a checkpoint", "a session directory", …
FileKind sniff_file_kind(const std::filesystem::path& path);

struct OutputRequest {
  std::string option;             // how the user named it, for messages: "--out", "--csv", "--record"
  std::filesystem::path path;
  FileKind kind = FileKind::Other;  // what will be written there
  uint64_t bytes_needed = 0;      // free space required in its directory (an estimate)
};

// Throws UserError("OPTION PATH: what is wrong; what to do") when the output cannot be written
// (empty path, missing or read-only directory, not enough space, a directory in the way), when it
// is one of `inputs` or lies inside one of them, or when it exists and holds another kind of file.
// `force` allows the last two.
void check_output(const OutputRequest& out, const std::vector<std::filesystem::path>& inputs, bool force);

// Free bytes in the directory that would hold `path` (0 when unknown).
uint64_t free_bytes_for(const std::filesystem::path& path);

}  // namespace memscope::model
