// The vocabulary of the recall tasks (MQAR, needle), split as Zoology splits it: a key range and
// a disjoint value range, so a model cannot answer a query by echoing a key.
//   0 filler · 1 .. keys: keys k0..k(keys−1) · keys+1 .. keys+values: values v0..v(values−1)
#pragma once
#include <cstdint>
#include <string>

namespace memscope::model {

struct KeyValueVocab {
  static constexpr int64_t kFiller = 0;
  int64_t keys = 0;
  int64_t values = 0;

  int64_t size() const { return 1 + keys + values; }
  int64_t key(int64_t i) const { return 1 + i; }
  int64_t value(int64_t j) const { return 1 + keys + j; }
  bool is_key(int64_t id) const { return id >= 1 && id <= keys; }
  bool is_value(int64_t id) const { return id > keys && id < size(); }
  // "·" for filler, "k12", "v3", "?ID" outside the vocabulary.
  std::string label(int64_t id) const {
    if (id == kFiller) return "·";
    if (is_key(id)) return "k" + std::to_string(id - 1);
    if (is_value(id)) return "v" + std::to_string(id - 1 - keys);
    return "?" + std::to_string(id);
  }
};

}  // namespace memscope::model
