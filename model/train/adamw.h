// AdamW (Loshchilov & Hutter) with decoupled weight decay, written out so that its state is ours
// to checkpoint by parameter name and behaves the same on LibTorch 1.13 and 2.x. The update is
// torch.optim.AdamW's, term for term (tests/model/test_trainer.cpp compares them).
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/session/safetensors_writer.h"

namespace memscope::model {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.01;  // applied to matrices (dim ≥ 2) only: not to norms, biases, gates' biases
};

class AdamW {
 public:
  AdamW(NamedTensors parameters, AdamWOptions options);

  // One update with learning rate `lr` from each parameter's .grad() (absent grads are skipped).
  void step(double lr);
  void zero_grad();

  int64_t steps() const { return steps_; }
  void set_options(const AdamWOptions& options) { options_ = options; }
  const NamedTensors& parameters() const { return parameters_; }

  // "optim/exp_avg/NAME", "optim/exp_avg_sq/NAME" and the step count, for checkpoints.
  NamedTensors state() const;
  // The inverse; throws UserError naming the tensor when one is missing or has the wrong shape.
  void load_state(const std::map<std::string, at::Tensor>& tensors, int64_t steps, const std::string& where);

 private:
  NamedTensors parameters_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

// Scales all gradients so their global L2 norm is at most `max_norm` (0: no clipping) and
// returns the norm before clipping.
double clip_grad_norm(const NamedTensors& parameters, double max_norm);

// The two halves of clip_grad_norm, for a caller that has the norm already (the per-module
// probes measure it on the way): the global L2 norm of the gradients, and the scaling.
double gradient_norm(const NamedTensors& parameters);
// ‖g‖² summed in float64, on the gradients' device (undefined without gradients): gradient_norm
// without its host transfer, for a caller that brings several numbers over in one.
at::Tensor gradient_norm_squared(const NamedTensors& parameters);
void clip_gradients(const NamedTensors& parameters, double norm, double max_norm);

}  // namespace memscope::model
