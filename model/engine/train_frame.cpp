#include "model/engine/train_frame.h"

#include "model/probe/probe_collector.h"

namespace memscope::model {

std::shared_ptr<Frame> train_frame(const Trainer& trainer, const TrainStepResult& r, int64_t step, int timeline,
                                   const ProbeConfig& probe) {
  auto frame = std::make_shared<Frame>();
  frame->step = step;
  frame->timeline = timeline;
  frame->kind = FrameKind::Train;
  frame->train_step = r.step;
  frame->loss = r.loss;
  frame->acc = r.acc;
  frame->grad_norm = r.grad_norm;
  frame->lr = r.lr;
  frame->tokens_per_s = r.tokens_per_s;
  frame->batch_tokens = r.row_tokens;
  frame->batch_targets = r.row_targets;
  frame->batch_loss = r.row_loss;
  for (const auto& m : r.modules) {
    frame->module_names.push_back(m.name);
    frame->module_grad_norm.push_back(static_cast<float>(m.grad_norm));
    frame->module_update_ratio.push_back(static_cast<float>(m.update_ratio));
  }
  auto due = [step](int64_t every) { return every > 0 && step % every == 0; };
  if (due(probe.every)) {
    ProbeInputs in;
    in.model = &trainer.model();
    in.state = &trainer.last_state();
    in.matrices = due(probe.matrices_every);
    collect_probes(*frame, in, probe);
  }
  return frame;
}

}  // namespace memscope::model
