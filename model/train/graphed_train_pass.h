// The training step's forward and backward as one CUDA graph (issue 23).
//
// On a GPU the training step is bound by the host issuing kernels, not by the GPU: one float32
// step of the d512×8 model launched 66,479 kernels and kept the GPU busy 13% of its wall time,
// eager PyTorch's 29% (README "On a GPU machine"). A CUDA graph issues them all at once. What the
// graph holds, the pass:
// - the model's forward over the batch, the loss, the backward, and the device-side sums the step
//   brings to the host (the loss, the query hits, the squared gradient norm, row 0's losses);
// - fixed addresses. The batch is copied into fixed buffers, the target count into a fixed scalar.
//   The gradients are the graph's: it is captured with none, so the backward's last kernels make
//   them, and every replay writes them again. Nothing may set them to none between replays
//   (AdamW::zero_grad): the clip, AdamW and the host transfer run outside the graph, as before, on
//   those gradients, and update the parameters in place, where the next replay reads them;
// - the host's choices at capture: the chunk size, bf16 autocast, the live memory rule, the
//   batch's shape. The trainer names them in `key`, and drops the graph when a live knob changes;
//   with a gate override in force it takes the plain step (the override's values come from the
//   host at every step).
//
// With capture off, or after a capture failed, the same buffers are run eagerly,
// with the gradients set to none first as the plain step does: the CPU tests check the plumbing
// there, the CUDA tests the graph against the plain step.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "model/data/batch.h"
#include "model/nn/language_model.h"
#include "model/session/safetensors_writer.h"

namespace memscope::model {

// What one pass leaves on the device for the trainer.
struct TrainPass {
  at::Tensor summary;  // [scalars + T] float64: the step's sums, then row 0's token losses
  LmState state;       // the batch's state after its last token
};

// The pass itself: the batch on the device and its target count, a float32 scalar tensor (on the
// device for a graph, so that a replay reads the new batch's count).
using TrainPassFn = std::function<TrainPass(const Batch& batch, const at::Tensor& targets)>;

class GraphedTrainPass {
 public:
  // capture: record and replay a CUDA graph; false runs the fixed buffers eagerly. Without a CUDA
  // build or a CUDA model the capture fails (failure() says why) and the buffers run eagerly.
  explicit GraphedTrainPass(bool capture);
  ~GraphedTrainPass();
  GraphedTrainPass(const GraphedTrainPass&) = delete;
  GraphedTrainPass& operator=(const GraphedTrainPass&) = delete;

  // Whether this build can capture CUDA graphs.
  static bool capture_available();

  // pass(batch, targets) through the graph captured for `key` (captured first when the key or the
  // batch's shapes changed), on `device`. `parameters` are the ones the backward fills. The
  // returned tensors are the graph's, rewritten by the next replay: a caller keeping one copies it.
  TrainPass run(const TrainPassFn& pass, const Batch& batch, double targets, const std::string& key,
                const NamedTensors& parameters, const c10::Device& device);

  // Drops the graph and the buffers: the next run captures again.
  void reset();

  // Whether run() replays a graph: its outputs and the parameters' gradients are then the graph's,
  // rewritten by the next replay, and nothing may drop the gradients (AdamW::zero_grad). False
  // while it runs eagerly.
  bool replays_graph() const;

  int64_t captures() const { return captures_; }  // graphs recorded since construction
  int64_t replays() const { return replays_; }    // passes run through a graph
  // Why capturing failed (then every later pass runs eagerly); empty while it has not.
  const std::string& failure() const { return failure_; }

 private:
  struct Graph;  // the captured pass: its graph and what it returned

  // The pass run eagerly on the buffers, from no gradients.
  TrainPass run_eagerly(const TrainPassFn& pass, const NamedTensors& parameters);
  // Records the graph of the pass on a side stream, after one eager warm-up pass there.
  void capture(const TrainPassFn& pass, const NamedTensors& parameters);

  bool capture_;
  std::string key_;
  Batch inputs_;        // the fixed buffers the pass reads, on the device
  at::Tensor targets_;  // [] float32 on the device
  std::unique_ptr<Graph> graph_;
  int64_t captures_ = 0, replays_ = 0;
  std::string failure_;
};

}  // namespace memscope::model
