#include "model/nn/state_clone.h"

namespace memscope::model {

LmState clone_state(const LmState& state) {
  LmState out;
  out.position = state.position;
  for (const auto& b : state.blocks) {
    BlockState c;
    if (!b.memory.memory.empty()) c.memory = b.memory.clone();
    if (b.attention.k.defined()) {
      c.attention.k = b.attention.k.clone();
      c.attention.v = b.attention.v.clone();
      c.attention.positions = b.attention.positions.clone();
    }
    c.attention.next = b.attention.next;
    for (const auto& r : b.retrieval) c.retrieval.push_back(r.clone());
    if (!b.selfmod.weights[0].empty()) c.selfmod = b.selfmod.clone();
    c.cms = b.cms.clone();
    out.blocks.push_back(std::move(c));
  }
  return out;
}

}  // namespace memscope::model
