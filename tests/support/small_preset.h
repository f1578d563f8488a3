// A preset shrunk for the trainer's tests (tests/model/test_trainer.cpp and its neighbours): a
// few training steps of it take about a second.
#pragma once
#include <string>
#include <vector>

#include "model/config/preset.h"

namespace memscope::test {

// `name` (demo-mqar's shape, made small), with `extra` on top.
inline model::Preset small_preset(const std::string& name = "demo-mqar-titans", std::vector<std::string> extra = {}) {
  std::vector<std::string> sets{"model.d_model=32", "model.memory_heads=2", "model.attention_heads=2",
                                "task.keys=16", "task.values=16", "task.pairs=4", "task.queries=4", "task.gap=4",
                                "train.batch=4", "train.steps=8", "train.warmup=2", "train.eval_batches=2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return model::load_preset(name, sets);
}

}  // namespace memscope::test
