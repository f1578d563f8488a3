// The task knobs (`task.*`): which synthetic task or text stream feeds the model, and its size.
#pragma once
#include <cstdint>
#include <string>

namespace memscope::model {

struct TaskConfig {
  std::string kind = "mqar";  // task.kind: mqar | needle | copy | text
  int64_t keys = 64;          // task.keys: mqar/needle, size of the key half of the vocabulary
  int64_t values = 64;        // task.values: mqar/needle, size of the value half; copy: content alphabet
  int64_t pairs = 8;          // task.pairs: mqar, key–value pairs per sequence
  int64_t queries = 8;        // task.queries: mqar, queries per sequence (distinct keys, <= pairs)
  int64_t gap = 16;           // task.gap: mqar, filler tokens between the last pair and the first query
  int64_t seq_len = 64;       // task.seq_len: needle/copy/text sequence length (mqar derives its own)
  int64_t copy_tokens = 8;    // task.copy_tokens: copy, tokens to remember
  std::string text_path;      // task.text_path: text, a UTF-8 file
};

}  // namespace memscope::model
