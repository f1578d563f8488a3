#include "model/data/byte_tokenizer.h"

#include <cstdio>
#include <stdexcept>

namespace memscope::model {

namespace {

const char* special_name(int64_t id) {
  switch (id) {
    case ByteTokenizer::kPad:
      return "<pad>";
    case ByteTokenizer::kBos:
      return "<bos>";
    case ByteTokenizer::kEos:
      return "<eos>";
    default:
      return nullptr;
  }
}

}  // namespace

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) {
    if (id >= 0 && id < 256) {
      text += static_cast<char>(id);
    } else if (const char* name = special_name(id)) {
      text += name;
    } else {
      throw std::out_of_range("ByteTokenizer::decode: id " + std::to_string(id) + " is outside [0, 259)");
    }
  }
  return text;
}

std::string ByteTokenizer::token_label(int64_t id) const {
  if (id >= 0x20 && id < 0x7f) return std::string(1, static_cast<char>(id));
  if (id >= 0 && id < 256) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(id));
    return hex;
  }
  if (const char* name = special_name(id)) return name;
  return "?" + std::to_string(id);
}

}  // namespace memscope::model
