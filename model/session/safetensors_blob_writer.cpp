#include "model/session/safetensors_blob_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "model/session/crc32c.h"
#include "model/util/errors.h"

namespace memscope::model {

std::string encode_safetensors(const std::vector<StBlob>& tensors, const std::map<std::string, std::string>& metadata,
                               const std::string& where) {
  nlohmann::json header = nlohmann::json::object();
  std::set<std::string> names;
  std::uint64_t offset = 0;
  std::vector<std::uint64_t> sizes;
  nlohmann::json checksums = nlohmann::json::object();
  for (const StBlob& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      throw UserError(where + ": tensor name '" + t.name + "' is empty, reserved or repeated");
    std::uint64_t bytes = st_dtype_size(t.dtype);
    for (auto d : t.shape) bytes *= static_cast<std::uint64_t>(d);
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    checksums[t.name] = crc32c_hex(crc32c(t.data, bytes));
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::map<std::string, std::string> meta = metadata;
  meta[kChecksumKey] = checksums.dump();  // read back by SafetensorsFile::read
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + text.size() + offset);
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));  // little-endian
  out += text;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (sizes[i] > 0) out.append(static_cast<const char*>(tensors[i].data), sizes[i]);
  return out;
}

void write_file_atomically(const std::filesystem::path& path, const std::string& bytes) {
  const std::string tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(path.string() + ": cannot open for writing: " + std::strerror(errno));
  size_t done = 0;
  int error = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      error = wrote < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(wrote);
  }
  // The bytes reach the disk before the rename makes them the file: after a power loss the path
  // holds the old file or the whole new one (a SIGKILL alone never needed this).
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(tmp.c_str());
    throw UserError(path.string() + ": write failed: " + std::strerror(error));
  }
  sync_directory_of(path);
}

void sync_directory_of(const std::filesystem::path& path) {
  // The rename itself is an entry of the directory: it is durable once the directory is synced.
  // A failure here is not an error: the file is complete, only its name may be older on power loss.
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  [[maybe_unused]] const int synced = ::fsync(dfd);
  ::close(dfd);
}

}  // namespace memscope::model
