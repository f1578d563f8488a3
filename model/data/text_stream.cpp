#include "model/data/text_stream.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/data/byte_tokenizer.h"
#include "model/data/rng.h"
#include "model/util/errors.h"

namespace memscope::model {

TextStreamTask::TextStreamTask(const TaskConfig& config) : seq_len_(config.seq_len) {
  check_knob("task.seq_len", config.seq_len, 1, kMaxTaskSeqLen);
  const std::string& path = config.text_path;
  if (path.empty()) throw UserError("task.text_path: required when task.kind is text");
  // A directory opens as a stream and reads as empty; name the real problem instead of "0 bytes".
  std::error_code error;
  std::ifstream in;
  if (std::filesystem::is_regular_file(path, error)) in.open(path, std::ios::binary);
  if (!in.is_open()) throw UserError("task.text_path: cannot read '" + path + "'");
  bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  const std::size_t invalid = first_invalid_utf8(bytes_);
  if (invalid != std::string_view::npos)
    throw UserError("task.text_path: '" + path + "' is not UTF-8: invalid sequence at byte " +
                    std::to_string(invalid));
  if (static_cast<int64_t>(bytes_.size()) < seq_len_ + 1)
    throw UserError("task.text_path: '" + path + "' has " + std::to_string(bytes_.size()) +
                    " bytes; task.seq_len " + std::to_string(seq_len_) + " needs at least " +
                    std::to_string(seq_len_ + 1));
}

int64_t TextStreamTask::vocab_size() const { return ByteTokenizer::kVocabSize; }

std::string TextStreamTask::token_label(int64_t id) const { return ByteTokenizer().token_label(id); }

Batch TextStreamTask::sample(int64_t batch, uint64_t seed) const {
  Batch out = empty_batch(batch, seq_len_);
  auto tokens = out.tokens.accessor<int64_t, 2>();
  auto targets = out.targets.accessor<int64_t, 2>();
  const int64_t windows = static_cast<int64_t>(bytes_.size()) - seq_len_;  // start offsets that fit
  for (int64_t b = 0; b < batch; ++b) {
    Rng rng(Rng::mix(seed, static_cast<uint64_t>(b)));
    const auto* window = reinterpret_cast<const unsigned char*>(bytes_.data()) + rng.uniform(windows);
    for (int64_t t = 0; t < seq_len_; ++t) {
      tokens[b][t] = window[t];
      targets[b][t] = window[t + 1];
    }
  }
  out.query_mask.fill_(true);
  return out;
}

std::size_t first_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length;
    uint32_t code, smallest;  // smallest: the least code point this length may encode (else overlong)
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2, code = lead & 0x1F, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code = lead & 0x0F, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code = lead & 0x07, smallest = 0x10000;
    } else {
      return i;
    }
    if (length > text.size() - i) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      code = (code << 6) | (next & 0x3F);
    }
    if (code < smallest || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += length;
  }
  return std::string_view::npos;
}

}  // namespace memscope::model
