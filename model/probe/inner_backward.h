// The backward through the inner loop (issue 18, item 1): where inside the memories' own updates
// the outer gradient grows. One sequence is stepped with the trainer's form (chunk b) and grad
// mode on, the outer loss is back-propagated once, and the gradient's norm is read at every
// token's state: ‖∂L/∂M_t‖ and ‖∂L/∂S_t‖ per layer, head and memory weight, the part of ∂L/∂S_t
// that flows through that token's Newton–Schulz call alone (muon), and for hope blocks ‖∂L/∂W_t‖
// of each self-modifying memory. A blow-up is then located in time (the token) and in place
// (layer, head, operation).
//
// L is the trainer's objective restricted to this sequence: the summed cross-entropy over its
// targets divided by `targets` (the whole batch's count, so the norms are this row's share of
// the training gradient), plus HOPE's auxiliary loss with its weight over `aux_tokens`.
#pragma once
#include <cstdint>
#include <vector>

namespace at {
class Tensor;
}

namespace memscope::model {

class LanguageModelImpl;

struct InnerBackwardOptions {
  int64_t chunk = 1;         // the trainer's chunk b for this step
  double targets = 1;        // divides the summed cross-entropy
  double aux_weight = 0;     // model.hope.aux_weight
  double aux_tokens = 1;     // B·T: divides the auxiliary loss
};

struct InnerBackward {
  int64_t layers = 0, heads = 0, weights = 0;  // the memory layers' layout (0 without memory layers)
  int64_t hope_layers = 0;                     // blocks with self-modifying memories
  // Per token: [layers, heads, weights, 3] = ‖∂L/∂M_t‖, ‖∂L/∂S_t‖, through NS (NaN where it does not apply).
  std::vector<std::vector<float>> memory;
  // Per token: [hope_layers, 5] ‖∂L/∂W_t‖ per self-modifying memory (k, v, eta, alpha, memory).
  std::vector<std::vector<float>> selfmod;
  double loss = 0;  // L, as back-propagated
};

// tokens, targets: [T] int64 on the model's device (targets < 0: not scored). Leaves the
// parameters' .grad untouched.
InnerBackward inner_backward(const LanguageModelImpl& model, const at::Tensor& tokens, const at::Tensor& targets,
                             const InnerBackwardOptions& options);

}  // namespace memscope::model
