// A task: a seeded source of batches (issue 4). Synthetic tasks probe one ability of the memory
// each (recall of many pairs, of one needle, of an ordered list); the text stream is plain
// next-byte language modelling.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/data/batch.h"

namespace memscope::model {

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t seq_len() const = 0;
  // A batch that is a pure function of (batch, seed): the same arguments give the same tensors.
  // Row b is drawn from Rng(Rng::mix(seed, b)), so it does not depend on the batch size either.
  virtual Batch sample(int64_t batch, uint64_t seed) const = 0;
  // A label for token id (GUI token strip), e.g. "k12", "v3", "·" for filler.
  virtual std::string token_label(int64_t id) const = 0;
};

struct TaskConfig {
  std::string kind = "mqar";  // task.kind: mqar | needle | copy | text
  int64_t keys = 64;          // task.keys: mqar/needle: size of the key range of the vocabulary
  int64_t values = 64;        // task.values: mqar/needle: size of the value range; copy: content alphabet
  int64_t pairs = 8;          // task.pairs: mqar: key-value pairs per sequence
  int64_t queries = 8;        // task.queries: mqar: queries per sequence (<= pairs, distinct keys)
  int64_t gap = 16;           // task.gap: mqar: filler tokens between the last pair and the first query
  int64_t seq_len = 64;       // task.seq_len: needle/copy/text (mqar ignores it: 2·pairs+gap+queries)
  int64_t copy_tokens = 8;    // task.copy_tokens: copy: tokens to remember
  std::string text_path;      // task.text_path: text: a UTF-8 file
};

// The task config.kind names, its knobs checked. Throws UserError naming the bad knob, e.g.
// "task.queries: must be <= task.pairs (8), got 12".
std::unique_ptr<Task> make_task(const TaskConfig& config);

// Bounds against typos, not limits of the method: beyond them a synthetic task would only
// exhaust memory.
inline constexpr int64_t kMaxTaskVocab = 1 << 16;
inline constexpr int64_t kMaxTaskSeqLen = 1 << 20;

// Throws UserError("KNOB: must be between LO and HI, got VALUE") unless lo <= value <= hi.
void check_knob(const char* knob, int64_t value, int64_t lo, int64_t hi);
// Throws UserError("KNOB: must be <= OTHER (LIMIT), got VALUE") when value > limit.
void check_knob_at_most(const char* knob, int64_t value, const char* other, int64_t limit);

}  // namespace memscope::model
