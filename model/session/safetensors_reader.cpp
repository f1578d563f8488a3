#include "model/session/safetensors_reader.h"

#include "model/session/crc32c.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/util/errors.h"

namespace memscope::model {
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw UserError(where + ": " + what); }

// A name from the file, quoted for a message: control bytes are escaped so that the message stays
// one line and cannot drive a terminal, and a long name is cut (at a UTF-8 boundary).
std::string shown(const std::string& name) {
  constexpr std::size_t kLimit = 120;
  std::size_t cut = std::min(name.size(), kLimit);
  while (cut > 0 && cut < name.size() && (static_cast<unsigned char>(name[cut]) & 0xc0) == 0x80) --cut;
  std::string out = "'";
  for (std::size_t i = 0; i < cut; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (cut < name.size() ? "'..." : "'");
}

std::uint64_t read_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::uint64_t json_offset(const nlohmann::json& j, const std::string& where, const std::string& name) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<std::int64_t>() >= 0))
    fail(where, "tensor " + shown(name) + ": data_offsets must be non-negative integers");
  return j.get<std::uint64_t>();
}

StTensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, const std::string& where) {
  if (!entry.is_object()) fail(where, "tensor " + shown(name) + ": entry is not an object");
  StTensorInfo t;
  t.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string() || !parse_st_dtype(dtype->get<std::string>(), t.dtype))
    fail(where, "tensor " + shown(name) + ": missing or unsupported dtype (F32, F16, BF16, I32, I64, U8, F64)");
  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) fail(where, "tensor " + shown(name) + ": missing shape");
  for (const auto& d : *shape) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
      fail(where, "tensor " + shown(name) + ": shape entries must be non-negative integers");
    t.shape.push_back(d.get<std::int64_t>());
  }
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2)
    fail(where, "tensor " + shown(name) + ": data_offsets must be [begin, end]");
  t.begin = json_offset((*offsets)[0], where, name);
  t.end = json_offset((*offsets)[1], where, name);
  if (t.end < t.begin) fail(where, "tensor " + shown(name) + ": data_offsets end before begin");

  // Byte count from the shape, refusing overflow rather than wrapping.
  std::uint64_t bytes = st_dtype_size(t.dtype);
  for (std::int64_t d : t.shape) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / ud)
      fail(where, "tensor " + shown(name) + ": shape overflows");
    bytes *= ud;
  }
  if (bytes != t.end - t.begin)
    fail(where, "tensor " + shown(name) + ": shape needs " + std::to_string(bytes) + " bytes but data_offsets span " +
                    std::to_string(t.end - t.begin));
  return t;
}

}  // namespace

std::string st_quote(const std::string& name) { return shown(name); }

bool parse_st_dtype(std::string_view text, StDtype& out) {
  static const std::pair<std::string_view, StDtype> kNames[] = {{"F32", StDtype::F32}, {"F16", StDtype::F16},
                                                                 {"BF16", StDtype::BF16}, {"I32", StDtype::I32},
                                                                 {"I64", StDtype::I64}, {"U8", StDtype::U8},
                                                                 {"F64", StDtype::F64}};
  for (const auto& [name, dtype] : kNames)
    if (name == text) return out = dtype, true;
  return false;
}

std::size_t st_dtype_size(StDtype dtype) {
  switch (dtype) {
    case StDtype::F32: case StDtype::I32: return 4;
    case StDtype::F16: case StDtype::BF16: return 2;
    case StDtype::I64: case StDtype::F64: return 8;
    case StDtype::U8: return 1;
  }
  return 1;
}

const char* st_dtype_name(StDtype dtype) {
  switch (dtype) {
    case StDtype::F32: return "F32";
    case StDtype::F16: return "F16";
    case StDtype::BF16: return "BF16";
    case StDtype::I32: return "I32";
    case StDtype::I64: return "I64";
    case StDtype::U8: return "U8";
    case StDtype::F64: return "F64";
  }
  return "?";
}

std::uint64_t StTensorInfo::elements() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

StHeader parse_safetensors_header(std::string_view bytes, std::uint64_t file_size, const std::string& where) {
  if (file_size < 8 || bytes.size() < 8) fail(where, "too short for a safetensors file (" + std::to_string(file_size) + " bytes)");
  const std::uint64_t n = read_le64(reinterpret_cast<const unsigned char*>(bytes.data()));
  if (n > kMaxSafetensorsHeader) fail(where, "header length " + std::to_string(n) + " is above the 100 MB limit");
  if (n > file_size - 8) fail(where, "header length " + std::to_string(n) + " runs past the end of the file (truncated?)");
  if (bytes.size() < 8 + n) fail(where, "header is incomplete");
  const std::string_view text = bytes.substr(8, n);
  if (text.empty() || text.front() != '{') fail(where, "header is not a JSON object");

  nlohmann::json header = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) fail(where, "header is not valid JSON");

  StHeader out;
  out.data_start = 8 + n;
  const std::uint64_t data_size = file_size - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(where, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(where, "__metadata__[" + shown(m.key()) + "] is not a string");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(it.key(), *it, where));
    if (out.tensors.back().end > data_size)
      fail(where, "tensor " + shown(it.key()) + " ends at byte " + std::to_string(out.tensors.back().end) +
                      " of a " + std::to_string(data_size) + "-byte data section (truncated?)");
  }
  const auto checksums = out.metadata.find(kChecksumKey);
  if (checksums != out.metadata.end()) {
    const auto sums = nlohmann::json::parse(checksums->second, nullptr, false);
    if (sums.is_discarded() || !sums.is_object()) fail(where, "__metadata__ crc32c is not a JSON object");
    for (auto it = sums.begin(); it != sums.end(); ++it) {
      auto t = std::find_if(out.tensors.begin(), out.tensors.end(), [&](const auto& x) { return x.name == it.key(); });
      if (t == out.tensors.end()) fail(where, "__metadata__ crc32c names no tensor " + shown(it.key()));
      if (!it->is_string() || !parse_crc32c_hex(it->get<std::string>(), t->crc))
        fail(where, "__metadata__ crc32c of " + shown(it.key()) + " is not 8 hex digits");
      t->has_crc = true;
    }
    out.checksummed = std::all_of(out.tensors.begin(), out.tensors.end(), [](const auto& t) { return t.has_crc; });
    out.metadata.erase(checksums);
  }
  // The published format indexes the data section entirely, with no overlaps and no holes.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  for (const auto& t : out.tensors) {
    if (t.begin < cursor) fail(where, "tensor " + shown(t.name) + " overlaps the tensor before it");
    if (t.begin > cursor) fail(where, "a hole in the data section before tensor " + shown(t.name));
    cursor = t.end;
  }
  if (cursor != data_size)
    fail(where, std::to_string(data_size - cursor) + " bytes after the last tensor are not indexed");
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores the flag.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(path, std::strerror(errno));
  // A constructor that throws gets no destructor call, so a rejected file closes its own fd.
  try {
    struct stat st {};
    if (fstat(fd_, &st) != 0) fail(path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    unsigned char prefix[8] = {};
    if (size < 8 || pread(fd_, prefix, 8, 0) != 8) fail(path, "too short for a safetensors file (" + std::to_string(size) + " bytes)");
    const std::uint64_t n = std::min<std::uint64_t>(read_le64(prefix), std::min(size - 8, kMaxSafetensorsHeader));
    std::string bytes(8 + n, '\0');
    if (pread(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) fail(path, "cannot read the header");
    header_ = parse_safetensors_header(bytes, size, path);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile SafetensorsFile::from_bytes(std::string bytes, const std::string& where) {
  SafetensorsFile file;
  file.path_ = where;
  file.header_ = parse_safetensors_header(bytes, bytes.size(), where);
  file.bytes_ = std::move(bytes);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), bytes_(std::move(other.bytes_)), header_(std::move(other.header_)) {
  other.fd_ = -1;
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    bytes_ = std::move(other.bytes_);
    header_ = std::move(other.header_);
    other.fd_ = -1;
  }
  return *this;
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : header_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<unsigned char> SafetensorsFile::read(const StTensorInfo& tensor) const {
  std::vector<unsigned char> out(tensor.end - tensor.begin);
  std::size_t done = 0;
  if (fd_ < 0) {  // from_bytes: the header check put every tensor inside the bytes
    const auto* first = reinterpret_cast<const unsigned char*>(bytes_.data()) + header_.data_start + tensor.begin;
    std::copy(first, first + out.size(), out.begin());
    done = out.size();
  }
  while (done < out.size()) {
    const ssize_t got = pread(fd_, out.data() + done, out.size() - done,
                              static_cast<off_t>(header_.data_start + tensor.begin + done));
    if (got <= 0) fail(path_, "cannot read tensor " + shown(tensor.name) + " (file changed or truncated?)");
    done += static_cast<std::size_t>(got);
  }
  if (tensor.has_crc && crc32c(out.data(), out.size()) != tensor.crc)
    fail(path_, "tensor " + shown(tensor.name) + " fails its CRC32C checksum (its bytes changed after it was written)");
  return out;
}

std::vector<std::string> SafetensorsFile::failing_checksums() const {
  std::vector<std::string> bad;
  for (const auto& t : header_.tensors) {
    if (!t.has_crc) continue;
    try {
      read(t);
    } catch (const UserError&) {
      bad.push_back(t.name);
    }
  }
  return bad;
}

std::vector<unsigned char> SafetensorsFile::read(const std::string& name) const {
  const StTensorInfo* t = find(name);
  if (!t) fail(path_, "no tensor named " + shown(name));
  return read(*t);
}

}  // namespace memscope::model
