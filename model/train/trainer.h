// The outer loop (seeds' "outer training"): AdamW with warmup + cosine and gradient clipping on
// the task loss, back-propagated through the memories' inner updates. Sequences longer than
// train.bptt are cut into segments; the model state flows from one segment to the next and is
// detached between them (truncated BPTT). train.chunk / train.chunk_final give TNT's two stages.
//
// Batch i is a pure function of (train.seed, i), so a run resumed from a checkpoint at step s
// sees exactly the batches the uninterrupted run saw after s. Data-parallel (set_data_parallel),
// each rank trains on its rows of that same batch, so the world size can change between resumes.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config/preset.h"
#include "model/data/task.h"
#include "model/nn/language_model.h"
#include "model/train/adamw.h"
#include "model/train/module_norms.h"

namespace memscope::model {

class DataParallel;      // model/dist/data_parallel.h
class GraphedTrainPass;  // model/train/graphed_train_pass.h

struct TrainStepResult {
  int64_t step = 0;       // the step just completed, counting from 1
  double loss = 0;        // mean cross-entropy per target token
  double acc = 0;         // query accuracy of this batch
  double lr = 0;
  double grad_norm = 0;   // before clipping
  double tokens_per_s = 0;
  double seconds = 0;     // wall time of the step
  int64_t chunk = 0;      // the chunk size b this step trained with
  // The most bytes the step's tensors held at once, where it was measured: on the CPU, the first
  // step of each shape (train.memory_limit_gb); 0 elsewhere.
  int64_t memory_peak_bytes = 0;
  int world_size = 1;     // ranks that computed this step
  double comm_seconds = 0;  // of this step, inside collectives (data-parallel only)
  std::vector<ModuleNorm> modules;  // per module (train.module_norms), in the model's parameter order
  // Row 0 of the batch this rank trained (the train view shows it, issue 19): its tokens, its
  // targets (−1 where none) and each token's −log p(target) under the weights before the update
  // (NaN where there is no target).
  std::vector<int64_t> row_tokens, row_targets;
  std::vector<float> row_loss;
};

struct EvalResult {
  double loss = 0;
  double acc = 0;
  int64_t queries = 0;
};

// Everything that changes as training runs, copied (not shared) so that a later step cannot
// touch it: the engine's keyframes for rewind and fork.
struct TrainerSnapshot {
  int64_t step = 0;
  int64_t optimiser_steps = 0;
  bool corrupt_next = false;  // a planted corrupt batch not trained on yet (a keyframe between the two keeps it)
  std::map<std::string, at::Tensor> parameters;  // by parameter name
  std::map<std::string, at::Tensor> optimiser;   // AdamW::state() names

  int64_t bytes() const;
};

class Trainer {
 public:
  // A fresh run: the model is initialised from train.seed.
  explicit Trainer(Preset preset);
  ~Trainer();
  Trainer(Trainer&&);
  Trainer& operator=(Trainer&&);

  // Continues the run saved in `checkpoint`, with `overrides` on its stored preset (e.g. more steps).
  static Trainer resume(const std::filesystem::path& checkpoint, const std::vector<std::string>& overrides = {});

  // One outer step. Throws a runtime_error naming the step when the loss or gradient is not finite
  // (the parameters are left as they were).
  TrainStepResult train_step();

  // The batch training step `step` (counting from 1) trains on: a pure function of (seed, step).
  Batch training_batch(int64_t step) const;
  // The loss and query accuracy train_step() would report for `step` with the current weights
  // (forward only, that step's chunk): the reference the step into a training step is checked by.
  EvalResult training_batch_loss(int64_t step) const;

  // Loss and query accuracy on a fixed evaluation set (its own seeds, disjoint from training's).
  EvalResult evaluate(int64_t batches) const;
  EvalResult evaluate(const Task& task, int64_t batches) const;

  void save(const std::filesystem::path& path) const;

  // Trains data-parallel from now on: this trainer computes its rank's rows of every batch and
  // steps with the gradient averaged over the ranks. Rank 0's parameters are broadcast first, so
  // every rank starts from the same weights.
  void set_data_parallel(std::shared_ptr<DataParallel> group);
  const std::shared_ptr<DataParallel>& data_parallel() const { return data_parallel_; }
  // Throws a UserError naming the first parameter that is not bit-identical on every rank.
  void check_ranks_agree() const;

  TrainerSnapshot snapshot() const;
  // Restores a snapshot taken from a trainer of the same preset shape (restart knobs equal).
  void restore(const TrainerSnapshot& snapshot);

  // Takes a preset that differs from preset() only in live knobs (model/config/knobs.h): the
  // schedule, AdamW's options and the memory rule change from the next step on.
  void apply_live(const Preset& preset);

  // The pass of each step (forward, loss, backward) through fixed buffers, recorded and replayed as
  // a CUDA graph when `capture` (graphed_train_pass.h). By default a CUDA model with
  // engine.cuda_graph on gets one, unless data-parallel; tests force the buffers on the CPU.
  void use_graphed_pass(bool capture);
  const GraphedTrainPass* graphed_pass() const { return graphed_pass_.get(); }
  // Whether the pass's graph is asked for: engine.cuda_graph on a CUDA model, or use_graphed_pass.
  bool pass_graph_wanted() const;
  // Why this step's pass cannot be graphed, in a few words for the status line ("data-parallel");
  // empty where it can.
  std::string pass_graph_not_applicable() const;

  // Fault injection (issue 19's corrupt batch): the next training step's batch is replaced by
  // uniformly random tokens and targets at the same positions, as a corrupt data shard would be.
  void corrupt_next_batch() { corrupt_next_ = true; }

  int64_t step() const { return step_; }
  bool done() const { return step_ >= preset_.train.steps; }
  const Preset& preset() const { return preset_; }
  const Task& task() const { return *task_; }
  // The model state at the end of the last training step (its batch's memories), detached.
  const LmState& last_state() const { return last_state_; }
  const LanguageModel& model() const { return model_; }
  // Where the model runs (default_device() when it was built).
  c10::Device device() const { return model_->embedding.device(); }
  LanguageModel& model() { return model_; }

 private:
  Preset preset_;
  std::unique_ptr<Task> task_;
  LanguageModel model_{nullptr};
  std::unique_ptr<AdamW> optimiser_;
  int64_t step_ = 0;
  bool corrupt_next_ = false;
  LmState last_state_;
  std::shared_ptr<DataParallel> data_parallel_;
  std::unique_ptr<GraphedTrainPass> graphed_pass_;  // engine.cuda_graph on a GPU (use_graphed_pass)
  bool graphed_pass_forced_ = false;
  std::string memory_checked_shape_;  // the step shape last checked to fit in memory (train_step)

  std::vector<at::Tensor> parameter_tensors() const;  // in the optimiser's (the model's) order
  // The graphed pass this step takes, or null for the plain one (then any graph is dropped).
  GraphedTrainPass* graphed_pass_for_step();
};

// The model a preset describes, with its vocabulary taken from the preset's task.
LanguageModel build_model(const Preset& preset, int64_t vocab);

}  // namespace memscope::model
