#include "model/session/output_check.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "model/session/frame_chunk.h"
#include "model/session/safetensors_reader.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace fs = std::filesystem;

const char* describe(FileKind kind) {
  switch (kind) {
    case FileKind::Missing: return "nothing";
    case FileKind::Directory: return "a directory";
    case FileKind::Session: return "a recorded session";
    case FileKind::Checkpoint: return "a checkpoint";
    case FileKind::SessionExport: return "a session export";
    case FileKind::FrameChunk: return "a session's frame chunk";
    case FileKind::MemoryTrace: return "a memory trace";
    case FileKind::Safetensors: return "a safetensors file";
    case FileKind::Preset: return "a preset";
    case FileKind::Csv: return "a CSV file";
    case FileKind::Other: return "a file";
  }
  return "a file";
}

namespace {

std::string lower_extension(const fs::path& path) {
  std::string ext = path.extension().string();
  for (auto& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext;
}

FileKind sniff_safetensors(const fs::path& path) {
  try {
    const SafetensorsFile file(path.string());
    const auto& meta = file.header().metadata;
    const auto format = meta.find("format");
    if (format != meta.end() && format->second.rfind("memscope-checkpoint", 0) == 0) return FileKind::Checkpoint;
    if (format != meta.end() && format->second == kChunkFormat) return FileKind::FrameChunk;
    if (meta.count("session")) return FileKind::SessionExport;
    if (meta.count("rule") && meta.count("form")) return FileKind::MemoryTrace;
    return FileKind::Safetensors;
  } catch (const UserError&) {
    return FileKind::Other;  // named .safetensors but not one: still not ours to overwrite silently
  }
}

// A path made absolute and free of "..", for comparing locations that may not exist yet.
fs::path normal(const fs::path& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

bool inside(const fs::path& child, const fs::path& dir) {
  const fs::path c = normal(child), d = normal(dir);
  auto ci = c.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++ci) {
    if (di->empty()) continue;  // a trailing separator
    if (ci == c.end() || *ci != *di) return false;
  }
  return true;
}

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

}  // namespace

FileKind sniff_file_kind(const fs::path& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return FileKind::Missing;
  if (fs::is_directory(status)) return fs::exists(path / "session.json", ec) ? FileKind::Session : FileKind::Directory;
  if (!fs::is_regular_file(status)) return FileKind::Other;  // a FIFO or device: never opened here
  const std::string ext = lower_extension(path);
  if (ext == ".toml") return FileKind::Preset;
  if (ext == ".csv") return FileKind::Csv;
  // Any file may be safetensors whatever its name: the 8-byte header length says.
  std::ifstream in(path, std::ios::binary);
  unsigned char head[8] = {};
  if (in.read(reinterpret_cast<char*>(head), 8)) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
    if (n >= 2 && n <= kMaxSafetensorsHeader && in.get() == '{') return sniff_safetensors(path);
  }
  return FileKind::Other;
}

uint64_t free_bytes_for(const fs::path& path) {
  fs::path dir = normal(path).parent_path();
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

void check_output(const OutputRequest& out, const std::vector<fs::path>& inputs, bool force) {
  const std::string where = out.option + " " + out.path.string();
  if (out.path.empty()) throw UserError(out.option + ": the path is empty");
  const bool wants_dir = out.kind == FileKind::Session;
  const FileKind existing = sniff_file_kind(out.path);

  for (const auto& input : inputs) {
    if (input.empty()) continue;
    std::error_code ec;
    const bool same = fs::exists(input, ec) && fs::exists(out.path, ec) ? fs::equivalent(input, out.path, ec)
                                                                       : normal(input) == normal(out.path);
    if ((same || (fs::is_directory(input, ec) && inside(out.path, input))) && !force)
      throw UserError(where + ": " + (same ? "is" : "is inside") + " this command's input " + input.string() +
                      "; give another path (or --force to overwrite it)");
  }
  if (existing != FileKind::Missing) {
    if (wants_dir) {
      // An empty directory is fine: the recording fills it.
      if (existing != FileKind::Directory || !fs::is_empty(out.path))
        throw UserError(where + ": already exists (" + describe(existing) +
                        "); a recording never overwrites one, give a new name");
    } else if (existing == FileKind::Directory || existing == FileKind::Session) {
      throw UserError(where + ": is " + std::string(describe(existing)) + ", not a file");
    } else if (existing != out.kind && !force) {
      throw UserError(where + ": exists and is " + describe(existing) + ", not " + describe(out.kind) +
                      "; give another path (or --force to overwrite it)");
    }
  }

  // The directory that will hold it: exists, is writable, has room.
  const fs::path dir = normal(out.path).parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UserError(where + ": directory " + dir.string() + " does not exist" +
                    (fs::exists(dir, ec) ? " (it is not a directory)" : ""));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw UserError(where + ": cannot write in " + dir.string() + " (" + std::strerror(errno) + ")");
  const uint64_t free = free_bytes_for(out.path);
  if (out.bytes_needed > 0 && free < out.bytes_needed)
    throw UserError(where + ": only " + mib(free) + " free in " + dir.string() + ", about " + mib(out.bytes_needed) +
                    " needed");
}

}  // namespace memscope::model
