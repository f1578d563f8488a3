#include "model/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "model/data/rng.h"
#include "model/dist/data_parallel.h"
#include "model/nn/graphed_step.h"
#include "model/nn/state_clone.h"
#include "model/train/checkpoint.h"
#include "model/train/graphed_train_pass.h"
#include "model/train/lr_schedule.h"
#include "model/train/task_loss.h"
#include "model/util/autocast.h"
#include "model/util/cpu_memory_watch.h"
#include "model/util/device.h"
#include "model/util/errors.h"
#include "model/util/host_memory.h"

namespace memscope::model {

namespace {

// Evaluation batches come from their own stream of seeds, never one a training step uses.
constexpr uint64_t kEvalStream = 0x65'76'61'6c'00'00'00'00ull;  // "eval"

NamedTensors named_parameters(const LanguageModel& model) {
  NamedTensors out;
  for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

AdamWOptions adamw_options(const TrainConfig& c) { return {c.beta1, c.beta2, c.eps, c.weight_decay}; }

// What a training pass's graph fixes at its capture, besides the batch's shape and the live rule
// (apply_live drops the graph): the host's choices that the pass reads. Gate overrides are not
// graphed at all (graphed_pass_for_step).
std::string graph_key(const Preset& preset, int64_t chunk) {
  const TrainConfig& c = preset.train;
  std::ostringstream key;
  key << "chunk " << chunk << " bf16 " << c.bf16_autocast << " bptt " << c.bptt << " micro " << c.micro_batch
      << " norms " << c.module_norms << " aux " << std::hexfloat << preset.model.hope_aux_weight;
  return key.str();
}

}  // namespace

LanguageModel build_model(const Preset& preset, int64_t vocab) {
  LmConfig config = preset.model;
  config.vocab = vocab;
  LanguageModel model(config, preset.memory);
  model->to(default_device());  // initialised on the CPU, so a seed gives the same weights on any device
  return model;
}

Trainer::Trainer(Preset preset) : preset_(std::move(preset)), task_(make_task(preset_.task)) {
  torch::manual_seed(preset_.train.seed);
  model_ = build_model(preset_, task_->vocab_size());
  optimiser_ = std::make_unique<AdamW>(named_parameters(model_), adamw_options(preset_.train));
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) = default;
Trainer& Trainer::operator=(Trainer&&) = default;

Trainer Trainer::resume(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  const Checkpoint checkpoint = read_checkpoint(path);
  Trainer trainer(checkpoint_preset(checkpoint, overrides));
  load_parameters(trainer.model_, checkpoint);
  trainer.optimiser_->load_state(checkpoint.tensors, checkpoint.optimiser_steps, checkpoint.path);
  trainer.step_ = checkpoint.step;
  return trainer;
}

namespace {

// Rows [begin, begin + count) of a batch: a data-parallel rank's share, or a micro-batch.
Batch rows_of(const Batch& batch, int64_t begin, int64_t count) {
  Batch out = batch;
  for (at::Tensor* t : {&out.tokens, &out.targets, &out.query_mask}) *t = t->narrow(0, begin, count);
  return out;
}

// What a CPU training step's tensors may take: train.memory_limit_gb, or four fifths of what is
// free, shared with the other ranks on this machine. `bytes` is none where nothing is known.
struct StepMemoryLimit {
  std::optional<int64_t> bytes;
  bool from_knob = false;
  int64_t free = 0;  // what the machine had free, where the limit is taken from it
};

StepMemoryLimit step_memory_limit(const TrainConfig& c) {
  if (c.memory_limit_gb > 0) return {std::max<int64_t>(1, std::llround(c.memory_limit_gb * 1e9)), true, 0};
  const std::optional<int64_t> free = host_memory_free();
  if (!free) return {};
  const char* ranks_here = std::getenv("LOCAL_WORLD_SIZE");  // torchrun's and --nproc's
  const int64_t ranks = ranks_here ? std::max(1, std::atoi(ranks_here)) : 1;
  // A fifth kept back: malloc's own overhead and what the rest of the process (the GUI) allocates
  // meanwhile. At a tenth, a step stopped at the limit had taken the process to 23.7 of 24.7 GB.
  // At least a byte: a machine with nothing free has a limit, not none.
  return {std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(*free) * 0.8) / ranks), false, *free};
}

// A step's pass over its first `rows` sequences, `group` at a time; `whole_step`: the step's own
// pass (a data-parallel rank's all-reduce may start in its backward), not a measurement.
using RowsPass = std::function<TrainPass(int64_t rows, int64_t group, bool whole_step)>;

struct StepShape {
  int64_t step, rows, group, T, segment;  // rows: this rank's; group: train.micro_batch in force
};

struct MeasuredPass {
  TrainPass pass;
  int64_t peak = 0;  // 0 where nothing was counted (cpu_memory_watch.h)
};

// The step's pass with its tensors counted against the limit (README "Training in the memory you
// have"); none where it would pass it, stopped at that allocation.
std::optional<MeasuredPass> pass_within_memory(const RowsPass& run, const StepShape& s,
                                               const StepMemoryLimit& limit) {
  MeasuredPass out;
  try {
    out.peak =
        run_watched(limit.bytes.value_or(0), [&] { out.pass = run(s.rows, s.group, true); }).value_or(0);
  } catch (const CpuMemoryLimitReached&) {
    return std::nullopt;
  }
  return out;
}

// The peak of a smaller pass that fits under the limit, or none.
std::optional<int64_t> fitting_peak(const RowsPass& run, AdamW& optimiser, int64_t rows, int64_t group,
                                    int64_t limit) {
  optimiser.zero_grad();
  std::optional<int64_t> peak;
  try {
    peak = run_watched(limit, [&] { run(rows, group, false); });
  } catch (const CpuMemoryLimitReached&) {
  }
  optimiser.zero_grad();
  return peak;
}

// The one line a step that did not fit ends with: what it needs, what there is, and the knob that
// makes it fit. Two small micro-batched passes are measured for it: two sequences one at a time,
// and four two at a time. Every group after the first runs with the gradients and the first
// group's state held, so the peak grows by about the same amount with each sequence added to a
// group: the line through the two gives how many at a time should fit. The line is a model (on
// the GPU's ATen forms the kB-sized demo's peak grows faster than it), so the advice is then
// tried: two groups of that many, under the limit, and fewer until they fit, so that the knob the
// line names is one that works. Only a step that does not fit pays for these passes.
std::string does_not_fit(const RowsPass& run, AdamW& optimiser, const StepShape& s,
                         const StepMemoryLimit& limit) {
  optimiser.zero_grad();
  const int64_t bytes = limit.bytes.value_or(0);
  std::ostringstream error;
  error << "step " << s.step << " does not fit in memory: ";
  const std::string room = limit.from_knob
                               ? "train.memory_limit_gb allows " + memory_size_text(bytes)
                               : "the limit is " + memory_size_text(bytes) + " (four fifths of the " +
                                     memory_size_text(limit.free) + " free, for each rank here)";
  const std::optional<int64_t> by_one =
      s.group > 1 ? fitting_peak(run, optimiser, 2, 1, bytes) : std::nullopt;
  if (by_one) {
    const std::optional<int64_t> by_two =
        s.group > 2 ? fitting_peak(run, optimiser, std::min<int64_t>(4, s.rows), 2, bytes) : std::nullopt;
    // Where the second point is missing or not above the first, one sequence's whole peak stands
    // for each further one: too much, never too little.
    const bool slope = by_two && *by_two > *by_one;
    const int64_t each = slope ? *by_two - *by_one : *by_one;
    // A twentieth kept back: blocks under 1 MB are counted at their power-of-two size class
    // (small_block_cache.h), which does not grow in a straight line.
    int64_t fits = std::clamp<int64_t>((bytes - bytes / 20 - *by_one) / each + 1, 1, s.group - 1);
    std::optional<int64_t> tried = fits == 1 ? by_one : std::nullopt;
    // At most eight tries, each an eighth fewer (at least one): a step of 64 at a time pays for
    // eight passes of up to 128 sequences at most, and only when the line was wrong.
    for (int attempt = 0; !tried && attempt < 8 && fits > 1; ++attempt) {
      tried = fitting_peak(run, optimiser, std::min<int64_t>(2 * fits, s.rows), fits, bytes);
      if (!tried) fits -= std::max<int64_t>(1, fits / 8);
    }
    if (!tried) {  // no group above one fitted: one at a time, which did
      fits = 1;
      tried = by_one;
    }
    error << s.group << " sequences at once need about " << memory_size_text(*by_one + (s.group - 1) * each)
          << " (" << memory_size_text(each) << " each), and " << room << "; set train.micro_batch=" << fits
          << " to run " << fits << " at a time (the same step, in about " << memory_size_text(*tried)
          << "), or lower train.batch";
  } else {
    error << "one sequence of " << s.T << " tokens"
          << (s.segment < s.T ? " (in segments of " + std::to_string(s.segment) + ")" : "")
          << (s.group > 1 ? " at a time" : "") << " needs more, and " << room
          << "; set train.bptt to a shorter segment, or train a smaller model";
  }
  error << ". Nothing was updated.";
  return error.str();
}

// Random tokens everywhere, and random targets where the batch scores one: what a corrupt shard
// feeds the model (fault injection, Trainer::corrupt_next_batch).
Batch corrupted(const Batch& batch, int64_t vocab, uint64_t seed) {
  Rng random(seed);
  const at::Tensor cpu_tokens = batch.tokens.cpu().contiguous(), cpu_targets = batch.targets.cpu().contiguous();
  at::Tensor tokens = cpu_tokens.clone(), targets = cpu_targets.clone();
  int64_t* t = tokens.data_ptr<int64_t>();
  int64_t* y = targets.data_ptr<int64_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    t[i] = random.uniform(vocab);
    if (y[i] != kIgnoreIndex) y[i] = random.uniform(vocab);
  }
  Batch out = batch;
  out.tokens = tokens.to(batch.tokens.device());
  out.targets = targets.to(batch.targets.device());
  return out;
}

}  // namespace

TrainStepResult Trainer::train_step() {
  const auto start = std::chrono::steady_clock::now();
  const TrainConfig& c = preset_.train;
  const double lr = learning_rate_at(c, step_);
  const int64_t chunk = c.chunk_at(step_);

  // The batch is sampled on the CPU: what the host needs of it is read there, before it moves.
  Batch batch = training_batch(step_ + 1);
  if (corrupt_next_) {
    corrupt_next_ = false;
    batch = corrupted(batch, task_->vocab_size(), Rng::mix(preset_.train.seed, ~static_cast<uint64_t>(step_)));
  }
  const int64_t T = batch.tokens.size(1);
  const int64_t segment = c.bptt > 0 ? c.bptt : T;
  // The whole batch's target count, on every rank: each rank's loss is a share of the batch's mean.
  const double targets = std::max<double>(1.0, (batch.targets != kIgnoreIndex).sum().item<double>());
  // Data-parallel: this rank's rows, and a loss scaled by the world size so that the ranks'
  // averaged gradient is the whole batch's (a power of two scales exactly).
  int64_t rows = c.batch;
  double scale = 1.0;
  if (data_parallel_) {
    data_parallel_->set_step(step_ + 1);
    const auto [begin, end] = data_parallel_->shard(c.batch);
    batch = rows_of(batch, begin, end - begin);
    rows = end - begin;
    scale = data_parallel_->world_size();
  }
  QueryScore score;
  score.total = batch.query_mask.sum().item<int64_t>();
  const at::Tensor row_tokens = batch.tokens[0].contiguous(), row_targets = batch.targets[0].contiguous();

  // The pass: forward, loss and backward, and the sums the host needs, left on the device for one
  // transfer after the backward (on a GPU, a host read stalls the queue of kernels). It reads the
  // batch and the target count it is given, fixed buffers when it is a CUDA graph's, and nothing
  // else that changes from one step to the next (graph_key). train.micro_batch runs the rows a few
  // at a time, each group's backward adding to the gradients: the same step in less memory, since
  // every loss is already divided by the whole batch's target count.
  const int64_t micro_batch = c.micro_batch > 0 ? std::min(c.micro_batch, rows) : rows;
  auto run_rows = [&](const Batch& on_device, const at::Tensor& target_count, int64_t micro,
                      bool arm_overlap) {
    const int64_t batch_rows = on_device.tokens.size(0);
    at::Tensor loss_total, hits;
    std::vector<at::Tensor> row_loss;  // row 0's token losses, segment by segment
    LmState first_state;               // the first group's (row 0's) state at the end
    for (int64_t r0 = 0; r0 < batch_rows; r0 += micro) {
      const int64_t n = std::min(micro, batch_rows - r0);
      const bool last_group = r0 + n == batch_rows;
      const Batch group = rows_of(on_device, r0, n);
      LmState state = model_->initial_state(n);
      for (int64_t t = 0; t < T; t += segment) {
        const int64_t length = std::min(segment, T - t);
        const at::Tensor targets_here = group.targets.narrow(1, t, length);
        at::Tensor logits, loss;
        {
          // train.bf16_autocast: the forward's matrix products in bfloat16, which autocast keeps
          // out of softmax, norms and the loss; the backward follows the forward's casts.
          std::optional<Bf16Autocast> bf16;
          if (c.bf16_autocast) bf16.emplace(device().type());
          logits = model_->forward(group.tokens.narrow(1, t, length), state, chunk);
          loss = summed_cross_entropy(logits, targets_here);
        }
        if (logits.scalar_type() != at::kFloat && logits.scalar_type() != at::kDouble)
          logits = logits.to(at::kFloat);
        // The mean over the whole sequence, one segment at a time.
        at::Tensor objective = data_parallel_ ? loss * scale / target_count : loss / target_count;
        // HOPE: the auxiliary retrieval loss, per token and sequence, so that M_k and M_v train.
        const at::Tensor aux = model_->take_aux_loss(state);
        if (aux.defined())
          objective =
              objective + preset_.model.hope_aux_weight * scale * aux / static_cast<double>(c.batch * T);
        // The step's only backward: the gradients' all-reduce can start during it (bucket by
        // bucket). Not with segments or groups: a hook sees one backward's part of a gradient.
        if (data_parallel_ && arm_overlap && r0 == 0 && last_group && length == T)
          data_parallel_->arm_gradient_overlap(parameter_tensors());
        objective.backward();
        const at::Tensor segment_loss = loss.detach().to(at::kDouble);
        const at::Tensor segment_hits =
            query_hits(logits, targets_here, group.query_mask.narrow(1, t, length));
        loss_total = loss_total.defined() ? loss_total + segment_loss : segment_loss;
        hits = hits.defined() ? hits + segment_hits : segment_hits;
        if (r0 == 0) row_loss.push_back(token_losses(logits[0].detach(), targets_here[0]));
        state = state.detached();  // truncated BPTT: carry the state, not its history
      }
      if (r0 == 0) first_state = std::move(state);
    }
    // The loss, the hits and the squared gradient norm. The per-module probes bring their norms
    // over themselves; data-parallel, the norm is taken after the averaging below. Row 0's token
    // losses ride along after the scalars.
    std::vector<at::Tensor> sums{loss_total, hits.to(at::kDouble)};
    if (!c.module_norms && !data_parallel_) {
      const at::Tensor squared_norm = gradient_norm_squared(optimiser_->parameters());
      if (squared_norm.defined()) sums.push_back(squared_norm);
    }
    return TrainPass{at::cat({at::stack(sums), at::cat(row_loss)}), std::move(first_state)};
  };
  const TrainPassFn pass = [&](const Batch& on_device, const at::Tensor& target_count) {
    return run_rows(on_device, target_count, micro_batch, true);
  };
  // engine.cuda_graph on a GPU: the pass as one CUDA graph (graphed_train_pass.h).
  GraphedTrainPass* graphed = graphed_pass_for_step();
  TrainPass passed;
  int64_t memory_peak = 0;
  if (graphed) {
    passed = graphed->run(pass, batch, targets, graph_key(preset_, chunk), optimiser_->parameters(), device());
  } else {
    optimiser_->zero_grad();
    const Batch on_device = batch.to(device());
    const at::Tensor target_count = at::scalar_tensor(targets, at::kFloat);
    // The memory check (README "Training in the memory you have"): on the CPU, the first step of
    // each shape runs under a watch whose limit is the memory free. A step that would pass it stops
    // at that allocation with nothing updated, where the OOM killer would end the process.
    const bool counted = device().is_cpu() && cpu_memory_counted();
    const std::string shape = counted ? graph_key(preset_, chunk) + " rows " + std::to_string(rows) + " T " +
                                            std::to_string(T) + " limit " + std::to_string(c.memory_limit_gb)
                                      : std::string();
    if (counted && shape != memory_checked_shape_) {
      // Data-parallel, the checked step's all-reduce waits for its backward: a rank that stops
      // must not leave the others' buckets half started.
      const RowsPass rows_pass = [&](int64_t rows_here, int64_t group, bool whole_step) {
        return run_rows(rows_of(on_device, 0, rows_here), target_count, group, whole_step && !data_parallel_);
      };
      const StepShape step_shape{step_ + 1, rows, micro_batch, T, segment};
      const StepMemoryLimit limit = step_memory_limit(c);
      std::optional<MeasuredPass> measured = pass_within_memory(rows_pass, step_shape, limit);
      // Every rank stops if one does: one that went on would wait in the all-reduce for good.
      const bool stopped = data_parallel_ ? data_parallel_->any(!measured) : !measured;
      if (stopped) {
        optimiser_->zero_grad();
        throw UserError(measured ? "step " + std::to_string(step_ + 1) +
                                       " does not fit in memory on another rank, whose error says what fits. "
                                       "Nothing was updated."
                                 : does_not_fit(rows_pass, *optimiser_, step_shape, limit));
      }
      passed = std::move(measured->pass);
      memory_peak = measured->peak;
      memory_checked_shape_ = shape;
    } else {
      passed = pass(on_device, target_count);
    }
  }
  const bool graph_owned = graphed && graphed->replays_graph();  // its tensors: the next replay rewrites them

  // The one host transfer.
  const at::Tensor host = passed.summary.cpu();
  const int64_t scalars = host.numel() - T;
  double loss_sum = host[0].item<double>();
  score.correct = static_cast<int64_t>(host[1].item<double>());

  TrainStepResult r;
  if (data_parallel_) {
    const double comm_before = data_parallel_->stats().seconds;
    data_parallel_->average_gradients(parameter_tensors());
    const at::Tensor totals = at::tensor({loss_sum, static_cast<double>(score.correct), static_cast<double>(score.total)},
                                         at::kDouble);
    data_parallel_->sum(totals);
    loss_sum = totals[0].item<double>();
    score.correct = static_cast<int64_t>(totals[1].item<double>());
    score.total = static_cast<int64_t>(totals[2].item<double>());
    r.world_size = data_parallel_->world_size();
    r.comm_seconds = data_parallel_->stats().seconds - comm_before;
  }
  r.step = step_ + 1;
  r.memory_peak_bytes = memory_peak;
  r.loss = loss_sum / targets;
  r.acc = score.accuracy();
  r.lr = lr;
  r.chunk = chunk;
  r.row_tokens.assign(row_tokens.data_ptr<int64_t>(), row_tokens.data_ptr<int64_t>() + row_tokens.numel());
  r.row_targets.assign(row_targets.data_ptr<int64_t>(), row_targets.data_ptr<int64_t>() + row_targets.numel());
  for (auto& target : r.row_targets)
    if (target == kIgnoreIndex) target = -1;
  const double* losses = host.data_ptr<double>() + scalars;
  r.row_loss.assign(losses, losses + (host.numel() - scalars));
  // The gradient norm before clipping, measured once: with the per-module probes, by them.
  std::vector<at::Tensor> before;
  if (c.module_norms) r.modules = module_gradient_norms(optimiser_->parameters(), &before, &r.grad_norm);
  else if (scalars == 3) r.grad_norm = std::sqrt(host[2].item<double>());
  else r.grad_norm = gradient_norm(optimiser_->parameters());
  clip_gradients(optimiser_->parameters(), r.grad_norm, c.clip);
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    if (!graph_owned) optimiser_->zero_grad();  // a graph's next replay writes its own again
    throw std::runtime_error("step " + std::to_string(step_ + 1) + ": " +
                             (!std::isfinite(r.loss) ? "loss" : "gradient norm") +
                             " is not finite; the parameters were not updated");
  }
  optimiser_->step(lr);
  if (c.module_norms) module_update_ratios(r.modules, optimiser_->parameters(), before);
  ++step_;
  last_state_ = graph_owned ? clone_state(passed.state) : std::move(passed.state);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.seconds = seconds;
  r.tokens_per_s = static_cast<double>(c.batch * T) / std::max(seconds, 1e-9);  // the whole batch's, on any rank
  return r;
}

Batch Trainer::training_batch(int64_t step) const {
  const TrainConfig& c = preset_.train;
  return task_->sample(c.batch, Rng::mix(c.seed, static_cast<uint64_t>(step - 1)));
}

EvalResult Trainer::training_batch_loss(int64_t step) const {
  at::NoGradGuard no_grad;
  const Batch batch = training_batch(step).to(device());
  LmState state = model_->initial_state(preset_.train.batch);
  // One call equals train_step's segments: truncated BPTT cuts the history, not the values.
  const at::Tensor logits = model_->forward(batch.tokens, state, preset_.train.chunk_at(step - 1));
  QueryScore score;
  score += score_queries(logits, batch.targets, batch.query_mask);
  const double targets = std::max<double>(1.0, (batch.targets != kIgnoreIndex).sum().item<double>());
  EvalResult r;
  r.loss = summed_cross_entropy(logits, batch.targets).item<double>() / targets;
  r.acc = score.accuracy();
  r.queries = score.total;
  return r;
}

EvalResult Trainer::evaluate(int64_t batches) const { return evaluate(*task_, batches); }

EvalResult Trainer::evaluate(const Task& task, int64_t batches) const {
  at::NoGradGuard no_grad;
  const TrainConfig& c = preset_.train;
  const int64_t chunk = c.chunk_at(std::max<int64_t>(0, c.steps - 1));  // the chunk training ends with
  double loss_sum = 0.0, targets = 0.0;
  QueryScore score;
  for (int64_t i = 0; i < batches; ++i) {
    const Batch batch = task.sample(c.batch, Rng::mix(c.seed ^ kEvalStream, static_cast<uint64_t>(i))).to(device());
    LmState state = model_->initial_state(c.batch);
    const at::Tensor logits = model_->forward(batch.tokens, state, chunk);
    loss_sum += summed_cross_entropy(logits, batch.targets).item<double>();
    targets += (batch.targets != kIgnoreIndex).sum().item<double>();
    score += score_queries(logits, batch.targets, batch.query_mask);
  }
  EvalResult r;
  r.loss = loss_sum / std::max(1.0, targets);
  r.acc = score.accuracy();
  r.queries = score.total;
  return r;
}

void Trainer::save(const std::filesystem::path& path) const {
  write_checkpoint(path, preset_, model_, *optimiser_, step_, data_parallel_ ? data_parallel_->world_size() : 1);
}

void Trainer::use_graphed_pass(bool capture) {
  graphed_pass_ = std::make_unique<GraphedTrainPass>(capture);
  graphed_pass_forced_ = true;
}

bool Trainer::pass_graph_wanted() const {
  return graphed_pass_forced_ ||
         (preset_.engine.cuda_graph && device().is_cuda() && GraphedTrainPass::capture_available());
}

std::string Trainer::pass_graph_not_applicable() const {
  // Data-parallel, the collectives run inside the backward; a gate override's values are copied
  // from the host at every step (the inspect step's graph steps aside for them too); MAC's segment
  // attention picks the keys it keeps with nonzero(), a read of the device from the host.
  if (data_parallel_) return "data-parallel: the collectives run inside the backward";
  if (GraphedStep::gate_override_in_force(*model_)) return "a gate override is in force";
  if (model_->config().block == BlockKind::Mac) return "a MAC block picks its keys on the host";
  return "";
}

GraphedTrainPass* Trainer::graphed_pass_for_step() {
  if (!pass_graph_wanted() || !pass_graph_not_applicable().empty()) {
    if (graphed_pass_) graphed_pass_->reset();  // the plain step drops the gradients a graph made
    return nullptr;
  }
  if (!graphed_pass_) graphed_pass_ = std::make_unique<GraphedTrainPass>(/*capture=*/true);
  return graphed_pass_.get();
}

std::vector<at::Tensor> Trainer::parameter_tensors() const {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : optimiser_->parameters()) out.push_back(p);
  return out;
}

void Trainer::set_data_parallel(std::shared_ptr<DataParallel> group) {
  data_parallel_ = std::move(group);
  if (!data_parallel_) return;
  data_parallel_->shard(preset_.train.batch);  // a batch the world does not divide fails now, not at step 1
  data_parallel_->broadcast_from_rank0(parameter_tensors());
}

void Trainer::check_ranks_agree() const {
  if (!data_parallel_) return;
  std::vector<std::string> names;
  for (const auto& [name, p] : optimiser_->parameters()) names.push_back(name);
  data_parallel_->check_identical(parameter_tensors(), names);
}

int64_t TrainerSnapshot::bytes() const {
  int64_t total = 0;
  for (const auto* map : {&parameters, &optimiser})
    for (const auto& [name, t] : *map) total += static_cast<int64_t>(t.nbytes());
  return total;
}

TrainerSnapshot Trainer::snapshot() const {
  at::NoGradGuard no_grad;
  TrainerSnapshot s;
  s.step = step_;
  s.optimiser_steps = optimiser_->steps();
  s.corrupt_next = corrupt_next_;
  for (const auto& [name, p] : optimiser_->parameters()) s.parameters.emplace(name, p.detach().clone());
  for (const auto& [name, t] : optimiser_->state()) s.optimiser.emplace(name, t.clone());
  return s;
}

void Trainer::restore(const TrainerSnapshot& s) {
  at::NoGradGuard no_grad;
  for (const auto& [name, p] : optimiser_->parameters()) {
    const auto it = s.parameters.find(name);
    TORCH_CHECK(it != s.parameters.end() && it->second.sizes() == p.sizes(),
                "trainer restore: parameter '", name, "' is missing or has another shape");
    p.copy_(it->second);
  }
  optimiser_->load_state(s.optimiser, s.optimiser_steps, "keyframe");
  step_ = s.step;
  corrupt_next_ = s.corrupt_next;
}

void Trainer::apply_live(const Preset& preset) {
  if (graphed_pass_) graphed_pass_->reset();  // the graph fixed the rule it was captured with
  memory_checked_shape_.clear();              // a live rule (memory.ns.steps, say) changes what a step holds
  preset_ = preset;
  optimiser_->set_options(adamw_options(preset_.train));
  model_->set_live_rule(preset_.memory);
}

}  // namespace memscope::model
