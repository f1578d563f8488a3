// Next-byte language modelling over one UTF-8 text file, with ByteTokenizer ids. The file is read
// once; each row of a batch is a window of seq_len + 1 consecutive bytes at a seeded random
// offset: tokens are its first seq_len bytes, targets the seq_len bytes after them (every
// position has a loss and counts for accuracy). No <bos> is added, and a window may start inside
// a multi-byte character, as any byte-level model meets mid-stream.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "model/data/task.h"

namespace memscope::model {

class TextStreamTask : public Task {
 public:
  // Reads config.text_path and checks task.seq_len. Throws UserError starting "task.text_path:"
  // and naming the path when the file cannot be read, is not UTF-8 (with the byte offset of the
  // first invalid sequence), or is shorter than seq_len + 1 bytes.
  explicit TextStreamTask(const TaskConfig& config);

  std::string name() const override { return "text"; }
  int64_t vocab_size() const override;
  int64_t seq_len() const override { return seq_len_; }
  Batch sample(int64_t batch, uint64_t seed) const override;
  std::string token_label(int64_t id) const override;

 private:
  std::string bytes_;
  int64_t seq_len_;
};

// The offset of the first byte of the first invalid UTF-8 sequence in text (a stray continuation
// byte, a truncated sequence, an overlong form, a surrogate, or a code point past U+10FFFF), or
// std::string_view::npos when text is valid.
std::size_t first_invalid_utf8(std::string_view text);

}  // namespace memscope::model
