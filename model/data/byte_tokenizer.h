// Byte-level tokens: ids 0..255 are the bytes themselves, then three specials. Any text, in any
// encoding, round-trips, and the vocabulary stays small enough for a debugger's embedding table.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::model {

class ByteTokenizer {
 public:
  static constexpr int64_t kPad = 256;
  static constexpr int64_t kBos = 257;
  static constexpr int64_t kEos = 258;
  static constexpr int64_t kVocabSize = 259;

  // One id per byte.
  std::vector<int64_t> encode(std::string_view text) const;
  // Bytes as themselves, specials as "<pad>", "<bos>", "<eos>"; throws std::out_of_range for an
  // id outside [0, kVocabSize).
  std::string decode(const std::vector<int64_t>& ids) const;
  // A label for the GUI's token strip: printable ASCII as itself, other bytes as "\xNN",
  // specials as "<bos>" etc., and an id outside the vocabulary as "?ID".
  std::string token_label(int64_t id) const;
};

}  // namespace memscope::model
