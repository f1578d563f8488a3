// A task: a seeded source of batches (issue 4). Synthetic tasks probe one ability of the memory
// each (recall of many pairs, of one needle, of an ordered list); the text stream is plain
// next-byte language modelling.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/data/batch.h"
#include "model/data/task_config.h"

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
