// A safetensors reader that trusts nothing in the file (DESIGN "Sessions"): every offset,
// shape and byte count is checked before use, and tensor data is read lazily with pread, so a
// long session never loads whole. Plain C++ with no torch, so it fuzzes fast.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::model {

// F64 is not in the list but is in the published format: sessions keep the outer loss in it.
enum class StDtype { F32, F16, BF16, I32, I64, U8, F64 };

// "F32" → F32; false for a dtype this reader does not take.
bool parse_st_dtype(std::string_view text, StDtype& out);
std::size_t st_dtype_size(StDtype dtype);
const char* st_dtype_name(StDtype dtype);

// A tensor name from a file, quoted for an error message: control bytes escaped (the message stays
// one line), a long name cut.
std::string st_quote(const std::string& name);

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // offsets within the data section, as in the header
  std::uint64_t end = 0;
  bool has_crc = false;     // the writer stored the CRC32C of its bytes (__metadata__ "crc32c")
  std::uint32_t crc = 0;
  std::uint64_t elements() const;
};

// The parsed and checked header of one file. Throws UserError("FILE: what is wrong") for any
// malformed input: a header length past the file or above 100 MB, bad JSON, unknown dtypes,
// negative or overflowing shapes, byte counts that do not match shapes, offsets outside the data,
// overlapping tensors, or holes in the data section.
// memscope's writer stores every tensor's CRC32C as __metadata__["crc32c"], a JSON object
// {"name": "8 hex digits"}; other safetensors readers ignore it. Files written before it (and by
// other writers) have none: they read as before, "unverified".
inline constexpr const char* kChecksumKey = "crc32c";

struct StHeader {
  std::vector<StTensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;  // without kChecksumKey, which fills the tensors' crc
  std::uint64_t data_start = 0;       // absolute file offset of the data section
  bool checksummed = false;           // every tensor has its CRC32C
};

inline constexpr std::uint64_t kMaxSafetensorsHeader = 100ull * 1024 * 1024;

// Parses a header from bytes (the whole file or at least its first 8 + N bytes); file_size is
// the full file's size. `where` names the source in error messages.
StHeader parse_safetensors_header(std::string_view bytes, std::uint64_t file_size, const std::string& where);

class SafetensorsFile {
 public:
  // Opens and checks the header. Only a regular file is opened: a FIFO or a device named like a
  // chunk would block or never end.
  explicit SafetensorsFile(const std::string& path);
  // The same checks on bytes already in memory (a frames chunk that came over the wire, issue 22);
  // `where` names them in errors.
  static SafetensorsFile from_bytes(std::string bytes, const std::string& where);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const StHeader& header() const { return header_; }
  const StTensorInfo* find(const std::string& name) const;  // nullptr if absent

  // The tensor's raw little-endian bytes, read now from disk and checked against its CRC32C when
  // the file has one (a mismatch throws UserError naming the tensor).
  std::vector<unsigned char> read(const StTensorInfo& tensor) const;
  std::vector<unsigned char> read(const std::string& name) const;  // throws if absent
  // Reads every tensor and returns the names of those whose bytes fail their checksum.
  std::vector<std::string> failing_checksums() const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;
  std::string bytes_;  // the whole file, for from_bytes (fd_ is then −1)
  StHeader header_;
};

}  // namespace memscope::model
