// The torch-free safetensors writer: tensors given as raw little-endian bytes. The session writer
// uses it on its own thread (frames are plain host data), and the torch writer wraps it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/session/safetensors_reader.h"

namespace memscope::model {

struct StBlob {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;  // elements · dtype size bytes, borrowed until the write returns
};

// The file's bytes: the 8-byte little-endian header length, the JSON header padded with spaces to
// a multiple of 8 (so the data starts aligned), then the data in `tensors` order. Throws UserError
// naming `where` for an empty, reserved or repeated name.
std::string encode_safetensors(const std::vector<StBlob>& tensors, const std::map<std::string, std::string>& metadata,
                               const std::string& where);

// Writes `bytes` to `path`.tmp and renames it to `path`: a killed process leaves either the old
// file or the whole new one, never a torn one. Throws UserError naming the file on failure (the
// temporary file is removed).
// The data is fsync'ed before the rename and the directory after it, so power loss is covered too.
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);

// fsync of the directory holding `path` (best effort): makes a rename or a new file's name durable.
void sync_directory_of(const std::filesystem::path& path);

inline void write_safetensors_blobs(const std::filesystem::path& path, const std::vector<StBlob>& tensors,
                                    const std::map<std::string, std::string>& metadata = {}) {
  write_file_atomically(path, encode_safetensors(tensors, metadata, path.string()));
}

}  // namespace memscope::model
