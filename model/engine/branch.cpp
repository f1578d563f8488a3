#include "model/engine/branch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/config/knobs.h"
#include "model/data/batch.h"
#include "model/data/rng.h"
#include "model/engine/train_frame.h"
#include "model/nn/graphed_step.h"
#include "model/nn/state_clone.h"
#include "model/probe/inner_backward.h"
#include "model/probe/probe_collector.h"
#include "model/probe/token_score.h"
#include "model/train/graphed_train_pass.h"
#include "model/util/errors.h"

namespace memscope::model {

namespace {

// Probe sequences come from their own seed stream, never one training or evaluation uses.
constexpr uint64_t kProbeStream = 0x70'72'6f'62'65'00'00'00ull;  // "probe"

constexpr double kMiB = 1024.0 * 1024.0;

int64_t budget_bytes(double mb) { return static_cast<int64_t>(mb * kMiB); }

int64_t state_bytes(const LmState& state) {
  int64_t total = 0;
  auto add = [&](const at::Tensor& t) {
    if (t.defined()) total += static_cast<int64_t>(t.nbytes());
  };
  for (const auto& b : state.blocks) {
    for (const auto& [name, t] : b.memory.to_map()) add(t);
    add(b.attention.k);
    add(b.attention.v);
    for (const auto& r : b.retrieval) add(r);
    for (const auto& w : b.selfmod.weights)
      for (const auto& t : w) add(t);
    for (const auto& level : b.cms.levels)
      for (const auto* part : {&level.weights, &level.accumulated})
        for (const auto& t : *part) add(t);
  }
  return total;
}

bool due(int64_t every, int64_t step) { return every > 0 && step % every == 0; }

// What a token stepped ahead holds of its own: its state, and the tensors of the probes' copy
// (copy_for_probes, below) that are not the state's.
int64_t held_bytes(const SteppedToken& token) {
  int64_t total = state_bytes(token.state);
  if (!token.probed) return total;
  auto add_copied = [&](const std::vector<at::Tensor>& copy, const std::vector<at::Tensor>& of) {
    for (size_t i = 0; i < copy.size(); ++i)
      if (copy[i].defined() && (i >= of.size() || !copy[i].is_same(of[i])))
        total += static_cast<int64_t>(copy[i].nbytes());
  };
  const LmState& copy = *token.probed;
  for (size_t l = 0; l < copy.blocks.size() && l < token.state.blocks.size(); ++l) {
    const BlockState& c = copy.blocks[l];
    const BlockState& s = token.state.blocks[l];
    add_copied(c.memory.memory, s.memory.memory);
    add_copied(c.memory.momentum, s.memory.momentum);
    for (size_t m = 0; m < c.selfmod.weights.size() && m < s.selfmod.weights.size(); ++m)
      add_copied(c.selfmod.weights[m], s.selfmod.weights[m]);
  }
  return total;
}

// A token's backward norms into its frame's grad_M, grad_S, grad_ns and selfmod_grad.
void add_inner_backward(Frame& frame, const InnerBackward& b, size_t token) {
  if (token >= b.memory.size()) return;
  const size_t cells = static_cast<size_t>(frame.layers * frame.heads) * frame.weights.size();
  if (cells > 0 && cells * 3 == b.memory[token].size())
    for (size_t c = 0; c < cells; ++c)
      for (int k = 0; k < 3; ++k)
        frame.weight_metrics[c * kWeightMetricCount + static_cast<size_t>(WeightMetric::GradM) + static_cast<size_t>(k)] =
            b.memory[token][c * 3 + static_cast<size_t>(k)];
  if (b.hope_layers > 0) frame.selfmod_grad = b.selfmod[token];
}

// The state after a probed step as the probes read it: every block's memory weights copied, and
// its momentum unless the step's record holds the sums the probes take from it
// (StepRecord::weight_squares; a snapshot frame then reads S itself), and on a snapshot frame its
// self-modifying weights, which only snapshots read (two demo-mqar-hope blocks' are 2.6 MB a
// token); the rest shared. A frame that a knob made a snapshot frame after its step reads the
// state's own self-modifying weights: safe too, as a step replaces them and never writes them.
// Made by the thread that stepped, whose cache holds what it has just written. The probes' thread
// reads these copies rather than the state, whose lines the next step reads: read there from the
// other core, they slowed the engine thread's next step by 20-40 µs a Titans-MLP token, where the
// copy costs it a few (README "The probes read copies").
LmState copy_for_probes(const LmState& state, const std::vector<std::optional<StepRecord>>& records,
                        bool snapshot) {
  auto copy = [](const at::Tensor& t) {
    if (!t.defined() || !t.is_cpu() || !t.is_contiguous()) return t.defined() ? t.clone() : t;
    at::Tensor out = at::empty_like(t);
    std::memcpy(out.data_ptr(), t.data_ptr(), t.nbytes());
    return out;
  };
  LmState out = state;
  for (size_t l = 0; l < out.blocks.size(); ++l) {
    BlockState& b = out.blocks[l];
    for (auto& t : b.memory.memory) t = copy(t);
    if (l >= records.size() || !records[l] || records[l]->weight_squares.empty())
      for (auto& t : b.memory.momentum) t = copy(t);
    if (snapshot)
      for (auto& weights : b.selfmod.weights)
        for (auto& t : weights) t = copy(t);
  }
  return out;
}

// Room in `frame` for what the probes will write into it, as much as `like` holds: made on the
// engine thread, so that the probes' thread, which fills the frame, allocates nothing that the
// frame keeps. What it allocates comes from its own malloc arena, which grows 4 KB at a time as the
// frame ring fills: about one page fault a Titans-MLP token, each costing the engine's step too on
// a PVM VM (README "Page faults on a PVM VM").
void reserve_like(Frame& frame, const Frame* like, const Frame* snapshots) {
  if (like) {
    frame.weights.reserve(like->weights.size());
    for (std::vector<float> Frame::*v : {&Frame::head_metrics, &Frame::weight_metrics, &Frame::cms_norm,
                                         &Frame::cms_tick, &Frame::selfmod_error, &Frame::selfmod_retention,
                                         &Frame::selfmod_grad, &Frame::retain_feature, &Frame::lr_feature})
      (frame.*v).reserve((like->*v).size());
  }
  if (snapshots) frame.matrices.reserve(snapshots->matrices.size());
}

// One inspect token through the model on the calling thread. `state` is a copy: the step replaces
// the state's tensors and never edits them, so the caller's state (and a frame's view of it) is
// left as it was while this runs beside the probes of the token before (engine.overlap).
// With `graphed`, a token whose shapes the graph fixes is replayed through it (engine.cuda_graph).
// With `copies`, a probed token also gets the probes' copy of its state (copy_for_probes), with
// what its matrix snapshots read when `snapshot`.
SteppedToken step_token(const LanguageModel& model, LmState state, const at::Tensor& token, int64_t chunk,
                        bool probe, bool copies, bool snapshot, GraphedStep* graphed = nullptr) {
  at::NoGradGuard no_grad;  // grad mode is per thread
  SteppedToken s;
  if (probe)
    for (const auto& b : state.blocks) {
      std::vector<at::Tensor> weights = b.memory.memory;
      for (const auto& w : b.selfmod.weights) weights.insert(weights.end(), w.begin(), w.end());  // hope blocks
      s.before.push_back(std::move(weights));
    }
  const auto start = std::chrono::steady_clock::now();
  // Records only for probed steps (issue 20): an unprobed step skips the inner losses. The loss
  // after the write of a general (MLP) step is left to the probes, which finish the record on
  // their own thread (SideJob::Probes) while this one steps the next token.
  const StepDetail detail = probe ? StepDetail::RecordLater : StepDetail::OutputOnly;
  if (graphed) s.graph_skip = GraphedStep::not_applicable(*model, state, chunk);
  s.graphed = graphed && s.graph_skip.empty();
  s.out = s.graphed ? graphed->step(*model, token, state, detail) : model->step(token, state, chunk, detail);
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (probe && copies) s.probed = copy_for_probes(state, s.out.records, snapshot);
  s.state = std::move(state);
  return s;
}

// A token stepped ahead into the slot start_token_ahead() made for it, which names its step,
// sequence and token.
void fill_token_ahead(SteppedToken& slot, SteppedToken stepped) {
  stepped.step = slot.step;
  stepped.sequence = slot.sequence;
  stepped.token_index = slot.token_index;
  slot = std::move(stepped);
}

}  // namespace

Branch::Branch(int id, const Preset& preset) : id_(id) {
  ring_ = std::make_shared<FrameRing>(budget_bytes(preset.engine.frame_budget_mb));
  start_over(std::make_unique<Trainer>(preset));
}

Branch::Branch(int id, const std::filesystem::path& checkpoint, const std::vector<std::string>& sets) : id_(id) {
  auto trainer = std::make_unique<Trainer>(Trainer::resume(checkpoint, sets));
  ring_ = std::make_shared<FrameRing>(budget_bytes(trainer->preset().engine.frame_budget_mb));
  start_over(std::move(trainer));
}

void Branch::start_over(std::unique_ptr<Trainer> trainer) {
  drop_stepped_ahead();
  graphed_.reset();
  graph_failure_.clear();  // a new model may capture
  graph_notices_ = {};
  graph_tally_ = {};
  graphed_step_forced_.reset();
  trainer_ = std::move(trainer);
  inspect_ = trainer_->model()->initial_state(1);
  cursor_ = {};
  sequence_loaded_ = -1;
  last_probed_.reset();
  last_snapshots_.reset();
  detectors_ = Detectors(preset().detect);
  keyframes_.clear();
  log_.clear();
  step_ = 0;
  ring_->truncate_after(0);
  ring_->set_budget(budget_bytes(preset().engine.frame_budget_mb));
  take_keyframe();
}

std::shared_ptr<const Frame> Branch::advance(std::vector<Event>& events) {
  const EngineConfig& e = preset().engine;
  const bool inspecting = e.mode == EngineMode::Inspect || (e.mode == EngineMode::TrainInspect && cursor_.remaining > 0);
  std::shared_ptr<Frame> frame = inspecting ? inspect_frame(events) : train_frame();
  if (!inspecting && e.mode == EngineMode::TrainInspect && due(e.inspect_every, trainer_->step())) {
    // Re-step the probe sequence from its start with the weights just trained.
    ensure_sequence_loaded(0);
    cursor_ = {0, 0, e.inspect_tokens > 0 ? e.inspect_tokens : sequence_tokens_.size(0)};
  }
  ++step_;
  note_graphs(frame->step, events);
  if (!inspecting)  // an inspect frame is observed where its probes are measured
    for (Event& event : detectors_.observe(*frame)) events.push_back(std::move(event));
  ring_->push(frame);
  if (due(e.keyframe_every, step_)) take_keyframe();
  return frame;
}

void Branch::ensure_sequence_loaded(int64_t sequence) {
  if (sequence_loaded_ == sequence) return;
  const EngineConfig& e = preset().engine;
  Batch batch;
  int64_t row = 0;
  if (e.inspect_batch > 0) {  // the step into a training step: that step's batch, one row after another
    batch = trainer_->training_batch(e.inspect_batch);
    row = sequence % batch.tokens.size(0);
  } else {
    batch = trainer_->task().sample(
        1, Rng::mix(static_cast<uint64_t>(e.probe_seed) ^ kProbeStream, static_cast<uint64_t>(sequence)));
  }
  const auto device = trainer_->model()->embedding.device();
  const at::Tensor tokens = batch.tokens[row].to(at::kCPU).contiguous();
  const at::Tensor targets = batch.targets[row].to(at::kCPU).contiguous();
  host_tokens_.assign(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + tokens.numel());
  host_targets_.assign(targets.data_ptr<int64_t>(), targets.data_ptr<int64_t>() + targets.numel());
  for (auto& t : host_targets_)
    if (t == kIgnoreIndex) t = -1;
  sequence_tokens_ = tokens.to(device);
  sequence_loaded_ = sequence;
  inner_backward_.reset();
  if (e.inspect_batch > 0) {
    // The backward through the inner loop of this row, once, for the frames to show token by token.
    InnerBackwardOptions o;
    o.chunk = inspect_chunk();
    o.targets = std::max<double>(1.0, (batch.targets != kIgnoreIndex).sum().item<double>());
    o.aux_weight = preset().model.hope_aux_weight;
    o.aux_tokens = static_cast<double>(batch.tokens.numel());
    inner_backward_ = inner_backward(*trainer_->model(), sequence_tokens_,
                                     at::where(targets == kIgnoreIndex, at::full_like(targets, -1), targets).to(device), o);
  }
}

int64_t Branch::inspect_chunk() const {
  const int64_t batch = preset().engine.inspect_batch;
  return batch > 0 ? preset().train.chunk_at(batch - 1) : 1;
}

void Branch::step_into(int64_t train_step, const std::function<void(const std::string&)>& progress) {
  drop_stepped_ahead();
  const int64_t at = trainer_->step(), steps = preset().train.steps;
  if (train_step < 1) throw UserError("training steps count from 1, got " + std::to_string(train_step));
  if (train_step > steps)
    throw UserError("training step " + std::to_string(train_step) + " is beyond the run (train.steps = " +
                    std::to_string(steps) + "; --set train.steps=N trains further)");
  if (train_step <= at)
    throw UserError("these weights are from after training step " + std::to_string(at) + "; stepping into step " +
                    std::to_string(train_step) + " needs weights from before it (a checkpoint at step " +
                    std::to_string(train_step - 1) + " or earlier)");
  if (progress && train_step - 1 > at)
    progress("rebuilding the weights from before training step " + std::to_string(train_step) + ": re-running steps " +
             std::to_string(at + 1) + " to " + std::to_string(train_step - 1));
  while (trainer_->step() < train_step - 1) trainer_->train_step();  // re-run from the nearest weights
  trainer_->apply_live(parse_preset(preset().toml, preset().name,
                                    {"engine.mode=inspect", "engine.inspect_batch=" + std::to_string(train_step)}));
  start_over(std::move(trainer_));  // step 0 of this timeline: the weights from before train_step
}

std::shared_ptr<Frame> Branch::inspect_frame(std::vector<Event>& events) {
  at::NoGradGuard no_grad;
  const int64_t step = step_ + 1;
  const ProbeConfig& p = preset().probe;
  const LanguageModel& model = trainer_->model();
  // First of all: nothing below may run the model while the side thread may still be stepping it.
  std::optional<SteppedToken> stepped = take_stepped_ahead(step);
  ensure_sequence_loaded(cursor_.sequence);
  if (cursor_.token_index == 0) inspect_ = model->initial_state(1);

  auto frame = std::make_shared<Frame>();
  frame->step = step;
  frame->timeline = id_;
  frame->kind = FrameKind::Inspect;
  frame->train_step = trainer_->step();
  frame->sequence = cursor_.sequence;
  frame->token_index = cursor_.token_index;
  const size_t index = static_cast<size_t>(cursor_.token_index);
  frame->token = host_tokens_[index];
  frame->target = host_targets_[index];

  const bool probe = due(p.every, step);
  std::vector<Event> detected;  // by the detectors, from this frame
  if (!stepped) {
    // A planted NaN gate: the gate reads NaN (× NaN) for this one step, then its override is put
    // back, also when the step throws (a failed step pauses the engine; the gate must not stay NaN).
    struct PutBack {
      LanguageModel& model;
      Gate gate;
      std::vector<std::pair<int64_t, GateOverride>> saved;
      ~PutBack() {
        for (auto& [l, previous] : saved) model->block(l)->memory->set_override(gate, previous);
      }
    } overridden{trainer_->model(), gate_fault_.gate, {}};
    if (gate_fault_.pending) {
      for (int64_t l = 0; l < model->layers(); ++l) {
        if (gate_fault_.layer >= 0 && gate_fault_.layer != l) continue;
        MemoryLayer& memory = trainer_->model()->block(l)->memory;
        std::vector<double> factors(static_cast<size_t>(model->config().memory_heads), 1.0);
        for (size_t h = 0; h < factors.size(); ++h)
          if (gate_fault_.head < 0 || gate_fault_.head == static_cast<int>(h)) factors[h] = std::numeric_limits<double>::quiet_NaN();
        overridden.saved.emplace_back(l, memory->override_of(gate_fault_.gate));
        memory->set_override(gate_fault_.gate, {GateOverride::Mode::Multiply, factors});
      }
      gate_fault_.pending = false;
    }
    GraphedStep* graphed = graphed_step();  // a planted gate is an override: applies() says no
    const int64_t captured = graphed ? graphed->captures() : 0, replayed = graphed ? graphed->replays() : 0;
    stepped = step_token(model, inspect_, sequence_tokens_.narrow(0, cursor_.token_index, 1), inspect_chunk(),
                         probe, copies_for_probes(), due(preset().probe.matrices_every, step), graphed);
    if (graphed) {
      GraphTally& t = graph_tally_;
      ++t.tokens;
      t.tokens_replayed += graphed->replays() - replayed;
      t.step_captures += graphed->captures() - captured;
      if (!stepped->graph_skip.empty()) t.token_skip = stepped->graph_skip;
    }
  }
  // The state before this token: with SideJob::NextToken freed with the last token, on the side
  // thread (below); else here.
  LmState previous = std::exchange(inspect_, std::move(stepped->state));
  graphed_tokens_ += stepped->graphed;
  if (graphed_ && !graphed_->failure().empty()) graph_failure_ = graphed_->failure();  // said once, on stderr

  ++cursor_.token_index;
  if (cursor_.remaining > 0) --cursor_.remaining;
  if (cursor_.token_index >= sequence_tokens_.size(0)) {
    ++cursor_.sequence;
    cursor_.token_index = 0;
  }

  const auto start = std::chrono::steady_clock::now();
  const bool next_token_aside = side_job_ == SideJob::NextToken;
  if (next_token_aside && spent_) spent_->state = std::move(previous);  // the last token whole, for the token ahead to free
  if (probe && next_token_aside) step_ahead_aside();  // while this token's probes are measured here
  previous = {};
  spent_.reset();  // here when no token ahead took it
  // With SideJob::Probes this frame's wall time holds the next token's step too, which is not this
  // step's (Frame::seconds); the probes measured beside it are.
  double next_step = 0;
  if (probe) {
    ProbeInputs in;
    in.model = &model;
    in.state = stepped->probed ? &*stepped->probed : &inspect_;
    in.memory_before = &stepped->before;
    in.records = &stepped->out.records;
    in.matrices = due(p.matrices_every, step);
    in.snapshot_buffers = &snapshot_buffers_;
    reserve_like(*frame, last_probed_.get(), in.matrices ? last_snapshots_.get() : nullptr);
    last_probed_ = frame;
    if (in.matrices) last_snapshots_ = frame;
    const at::Tensor logits = stepped->out.logits[0];
    // On a GPU the prediction and loss ride the probes' one host transfer; on the CPU one loop on
    // the host is cheaper than the four ATen calls (model/probe/token_score.h).
    const bool on_host = logits.is_cpu();
    if (!on_host) {
      in.extra.push_back(logits.argmax());
      if (frame->target >= 0) in.extra.push_back(-at::log_softmax(logits.to(at::kDouble), 0)[frame->target]);
    }
    double probes_took = 0;
    // Read here: a new sequence loaded by the token stepped ahead replaces it meanwhile.
    const InnerBackward* inner_backward = inner_backward_ ? &*inner_backward_ : nullptr;
    // The probes, the token's score and the detectors, which read both: all three aside, off the
    // engine thread (the detectors took 7–10 µs of a Titans-MLP token there, AMD VM).
    auto measure = [&] {
      const auto from = std::chrono::steady_clock::now();
      at::NoGradGuard no_grad_there;  // grad mode is per thread
      for (size_t l = 0; l < stepped->out.records.size(); ++l)
        if (auto& record = stepped->out.records[l]) finish_record(*record, in.state->blocks[l].memory.memory);
      const std::vector<double> extra = collect_probes(*frame, in, p);
      if (inner_backward) add_inner_backward(*frame, *inner_backward, index);
      const TokenScore score =
          on_host ? score_token(logits, frame->target)
                  : TokenScore{static_cast<int64_t>(extra[0]), frame->target >= 0 ? extra[1] : 0.0};
      frame->predicted = score.predicted;
      if (frame->target >= 0) frame->loss = score.loss;
      detected = detectors_.observe(*frame);
      probes_took = std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
    };
    // Part of the next snapshot frame's buffers (snapshot_buffers.h), so that its pages fault in
    // over the frames before it. Made on this thread, beside `measure` (which takes buffers on
    // snapshot frames only): from the engine thread's heap, whose growth is advised huge pages
    // (model/util/allocator.h). Made on the probes' thread they came from its own malloc arena,
    // which grows 4 KB at a time: 6 faults a Titans-MLP token, at 10-25 µs each on a PVM VM.
    auto prepare_snapshots = [&] {
      if (!in.matrices && p.matrices_every > 0)
        snapshot_buffers_.prepare(p.matrices_every - step % p.matrices_every);
    };
    // SideJob::Probes: the side thread measures them while this thread steps the next token, whose
    // step keeps this thread's caches and allocations (README "The probes' own cost on AVX2, and
    // the probes on the side thread"). Nothing here writes what `measure` reads until it is done,
    // and nothing leaves this scope before it is: `measure` holds references into it. Measured here
    // instead while the overlap does not pay: the side thread is not run when handed its job (a
    // busy machine, a VM's second vCPU held back by its host; model/engine/overlap_gauge.h).
    if (!next_token_aside && can_step_ahead() && overlap_gauge_.overlap_next() && side_->try_run(measure)) {
      const auto from = std::chrono::steady_clock::now();
      // A token in hand (stepped further at a snapshot frame before) leaves this thread nothing to
      // step but at a snapshot frame: then the wait below says nothing of whether overlapping pays.
      const bool nothing_to_step = ahead_in_hand_ && !in.matrices;
      try {
        if (!ahead_in_hand_) step_ahead_here();
        prepare_snapshots();
        // A snapshot frame's probes take several steps' time: on demo-mqar-hope 4–5 ms, most of it
        // the spectra of 40 matrices 64×256, against a 0.5 ms step (Intel VM). This thread steps
        // the tokens after it meanwhile, rather than wait, and takes them at their turns, their
        // probes aside while it waits (the tokens in hand are not added to until the next
        // snapshot). Stepping first paid more than taking the probes' shared loops first (their
        // spectra's groups, as wait() below does): demo-mqar-hope's default probes +36–50%
        // against +58–71% (+72–89% with neither; Intel VM, bench/probe_overhead).
        if (in.matrices && step_further_ != StepFurther::Off)
          while ((step_further_ == StepFurther::UpToTheCap || side_->busy()) && step_further()) {
          }
      } catch (...) {
        try {
          side_->wait();
        } catch (...) {
          // The step's own failure is the one to report.
        }
        throw;
      }
      const auto waiting = std::chrono::steady_clock::now();
      side_->wait();
      const auto done = std::chrono::steady_clock::now();
      if (!nothing_to_step)
        overlap_gauge_.overlapped(std::chrono::duration<double>(done - waiting).count(), probes_took);
      next_step = std::chrono::duration<double>(done - from).count() - probes_took;
    } else {
      measure();
      prepare_snapshots();
    }
  }
  if (!probe && frame->target >= 0 && preset().engine.inspect_batch > 0) {
    // A training batch's loss is what the step into it checks: every target token carries it.
    const at::Tensor log_p = at::log_softmax(stepped->out.logits[0].to(at::kDouble), 0);
    frame->loss = -log_p[frame->target].item<double>();
    frame->predicted = log_p.argmax().item<int64_t>();
  }
  frame->seconds =
      stepped->seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - next_step;
  frame->tokens_per_s = 1.0 / std::max(frame->seconds, 1e-9);
  if (!probe) detected = detectors_.observe(*frame);
  for (Event& event : detected) events.push_back(std::move(event));
  if (!next_token_aside) return frame;  // made here, freed here
  // Made on the side thread (records, weights and, added at the next step, its state): the next
  // token ahead frees it there, after its own step. Freed here instead, while that thread steps,
  // probe_overhead read +58% against +42% (fifth session), and on the AMD VM of README's "Hand-overs
  // on a slower machine" +61% against +36% (demo-mqar-titans). Likely why: the small-block cache
  // hands out the block freed last, so the side thread's next tensors would be blocks this core had
  // just touched, whose lines must come over from here (unproven: that VM shows no counters).
  spent_ = std::make_shared<SteppedToken>(std::move(*stepped));
  return frame;
}

bool Branch::copies_for_probes() const {
  // One thread steps and measures in turn: nothing to keep apart. A GPU's state is not stepped
  // ahead (can_step_ahead).
  return preset().engine.overlap && trainer_->model()->embedding.device().is_cpu();
}

bool Branch::can_step_ahead() {
  const EngineConfig& e = preset().engine;
  const bool next_is_inspect = e.mode == EngineMode::Inspect || (e.mode == EngineMode::TrainInspect && cursor_.remaining > 0);
  // A planted gate edits the model: not stepped ahead. On a GPU the step is asynchronous already.
  if (!e.overlap || !next_is_inspect || gate_fault_.pending ||
      !trainer_->model()->embedding.device().is_cpu())
    return false;
  // A new sequence loads its tokens: on the engine thread while the probes run aside (SideJob::
  // Probes), unless it is a training batch's row, whose loading makes the inner backward that those
  // probes read (engine.inspect_batch). One probed token in every sequence (one in about 30 on the
  // demo MQAR tasks) had run its probes on the engine thread alone.
  if (cursor_.token_index == 0 && (side_job_ == SideJob::NextToken || e.inspect_batch > 0)) return false;
  if (!side_) side_ = std::make_unique<SideThread>();
  return true;
}

SteppedToken& Branch::start_token_ahead() {
  SteppedToken& out = ahead_.emplace();
  out.step = step_ + 2;  // this step is step_ + 1 until advance() counts it
  out.sequence = cursor_.sequence;
  out.token_index = cursor_.token_index;
  return out;
}

SteppedToken Branch::step_token_here(const LmState& from, int64_t index, int64_t step) const {
  const ProbeConfig& p = preset().probe;
  return step_token(trainer_->model(), from, sequence_tokens_.narrow(0, index, 1), inspect_chunk(),
                    due(p.every, step), copies_for_probes(), due(p.matrices_every, step));
}

void Branch::step_ahead_here() {
  SteppedToken& out = start_token_ahead();
  ahead_in_hand_ = true;
  ahead_aside_ = false;
  try {
    const LanguageModel& model = trainer_->model();
    const bool first = cursor_.token_index == 0;  // of the next sequence (can_step_ahead)
    if (first) ensure_sequence_loaded(cursor_.sequence);
    fill_token_ahead(
        out, step_token_here(first ? model->initial_state(1) : inspect_, cursor_.token_index, out.step));
  } catch (...) {
    ahead_error_ = std::current_exception();  // thrown when its step is taken, as it would have been then
  }
}

void Branch::step_ahead_aside() {
  // Stepped at its turn instead, on this thread, while the side thread has been late (as the
  // probes are measured in line with SideJob::Probes; model/engine/overlap_gauge.h).
  // Nothing may be in hand: tokens stepped further (SideJob::Probes) are dropped by the switch
  // to this side job (set_side_job).
  if (ahead_in_hand_ || !can_step_ahead() || !overlap_gauge_.overlap_next()) return;
  SteppedToken& out = start_token_ahead();
  const bool probe = due(preset().probe.every, out.step);
  const bool snapshot = due(preset().probe.matrices_every, out.step);
  // The state is copied there, not here: the copy (9 µs of a 600 µs demo step on a slow VM) is on
  // the critical path either way, and the side thread needs its own. Nothing writes inspect_
  // before take_stepped_ahead() or drop_stepped_ahead() has waited for this job; the engine
  // thread's probes only read it meanwhile.
  const bool started = side_->try_run([&out, model = trainer_->model(), from = &inspect_,
                                       token = sequence_tokens_.narrow(0, cursor_.token_index, 1),
                                       chunk = inspect_chunk(), probe, copies = copies_for_probes(), snapshot,
                                       spent = std::exchange(spent_, nullptr)]() mutable {
    fill_token_ahead(out, step_token(model, *from, token, chunk, probe, copies, snapshot));
    spent.reset();
  });
  if (!started) {  // another timeline holds the spare core: this one steps on the engine thread
    ahead_.reset();
    return;
  }
  ahead_in_hand_ = true;
  ahead_aside_ = true;
}

bool Branch::step_further() {
  const EngineConfig& e = preset().engine;
  if (!ahead_in_hand_ || ahead_aside_ || ahead_error_ || further_.size() >= kMaxStepsFurther ||
      e.mode != EngineMode::Inspect || e.inspect_batch > 0)
    return false;
  const SteppedToken& last = further_.empty() ? *ahead_ : further_.back();
  // Within the sequence loaded: loading the next one would replace the tokens and targets that
  // the frames of the tokens in hand read.
  const int64_t index = last.token_index + 1;
  if (last.sequence != sequence_loaded_ || index >= sequence_tokens_.size(0)) return false;
  // Each holds a state of its own, and the probes' copy: a larger model holds fewer. The next one
  // is taken to hold what the last one does.
  int64_t held = held_bytes(last);
  for (const SteppedToken& t : further_) held += held_bytes(t);
  if (held > kMaxBytesFurther) return false;
  const int64_t step = last.step + 1;
  try {
    SteppedToken out = step_token_here(last.state, index, step);
    out.step = step;
    out.sequence = last.sequence;
    out.token_index = index;
    out.stepped_further = true;
    further_.push_back(std::move(out));
  } catch (...) {
    return false;  // stepped again at its turn, where it throws for the engine to report
  }
  return true;
}

void Branch::set_side_job(SideJob job) {
  if (job != side_job_) further_.clear();
  side_job_ = job;
}

std::optional<SteppedToken> Branch::take_stepped_ahead(int64_t step) {
  if (!ahead_in_hand_) return std::nullopt;
  ahead_in_hand_ = false;
  const bool aside = std::exchange(ahead_aside_, false);
  std::exception_ptr error = std::exchange(ahead_error_, nullptr);  // stepped here (SideJob::Probes)
  const auto waiting = std::chrono::steady_clock::now();
  try {
    side_->wait();  // stepped there (SideJob::NextToken); idle otherwise
  } catch (...) {
    error = std::current_exception();
  }
  std::optional<SteppedToken> out = std::exchange(ahead_, std::nullopt);  // its step, sequence and token are set
  // Stepped aside: how long this thread waited for the step against how long the step took there.
  if (aside && !error)
    overlap_gauge_.overlapped(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting).count(), out->seconds);
  const bool this_steps =
      out->step == step && out->sequence == cursor_.sequence && out->token_index == cursor_.token_index;
  if (!this_steps || error) further_.clear();  // none is stepped further from a failed step
  if (!this_steps) return std::nullopt;        // not this step's token: how it went does not matter
  if (error) std::rethrow_exception(error);  // a step that threw ahead throws now, as it would have then
  ++stepped_ahead_;
  taken_further_ += out->stepped_further;
  if (!further_.empty()) {  // the next one in hand
    ahead_ = std::move(further_.front());
    further_.pop_front();
    ahead_in_hand_ = true;
  }
  return out;
}

void Branch::drop_stepped_ahead() {
  further_.clear();
  if (!ahead_in_hand_) return;
  ahead_in_hand_ = false;
  ahead_aside_ = false;
  try {
    side_->wait();
  } catch (...) {
    // Thrown away with the token: the step it was for is not going to be taken.
  }
  ahead_error_ = nullptr;
  ahead_.reset();
}

Branch::~Branch() { drop_stepped_ahead(); }

bool Branch::step_graph_wanted() const {
  return graphed_step_forced_.has_value() ||
         (preset().engine.cuda_graph && GraphedStep::capture_available() && trainer_->device().is_cuda());
}

GraphedStep* Branch::graphed_step() {
  if (!step_graph_wanted() || !graph_failure_.empty()) return nullptr;
  if (!graphed_) graphed_ = std::make_unique<GraphedStep>(graphed_step_forced_.value_or(true));
  return graphed_.get();
}

void Branch::use_graphs(bool capture) {
  graphed_step_forced_ = capture;
  graphed_.reset();
  trainer_->use_graphed_pass(capture);
}

void Branch::note_graphs(int64_t step, std::vector<Event>& events) {
  auto notice = [&](std::string message) {
    Event e;
    e.step = step;
    e.timeline = id_;
    e.kind = EventKind::Notice;
    e.message = std::move(message);
    events.push_back(std::move(e));
  };
  GraphNotices& said = graph_notices_;
  if (!graph_failure_.empty() && !said.step_failed) {
    said.step_failed = true;
    notice("engine.cuda_graph: the inspect step could not be captured and runs without the graph: " +
           graph_failure_);
  } else if (graphed_ && graphed_->captures() > 0 && !said.step_captured) {
    said.step_captured = true;
    notice("engine.cuda_graph: the inspect step runs as a CUDA graph");
  }
  const GraphedTrainPass* pass = trainer_->graphed_pass();
  if (!pass) return;
  if (!pass->failure().empty() && !said.pass_failed) {
    said.pass_failed = true;
    notice("engine.cuda_graph: the training pass could not be captured and runs without the graph: " +
           pass->failure());
  } else if (pass->captures() > 0 && !said.pass_captured) {
    said.pass_captured = true;
    notice("engine.cuda_graph: the training pass runs as a CUDA graph");
  }
}

std::string Branch::graph_summary() const {
  const bool step_wanted = step_graph_wanted(), pass_wanted = trainer_->pass_graph_wanted();
  if (!step_wanted && !pass_wanted)
    return trainer_->device().is_cuda() && !preset().engine.cuda_graph ? "CUDA graphs off (engine.cuda_graph)"
                                                                       : "";
  // "step graph 510/512 tokens, 4 captures; not: a gate override is in force"
  auto tally = [](const std::string& graph, int64_t replayed, int64_t offered, const char* unit,
                  int64_t captures, const std::string& skip) {
    std::string line = graph + " " + std::to_string(replayed) + "/" + std::to_string(offered) + " " + unit;
    if (captures > 0) line += ", " + std::to_string(captures) + (captures == 1 ? " capture" : " captures");
    if (replayed < offered && !skip.empty()) line += "; not: " + skip;
    return line;
  };
  const GraphTally& t = graph_tally_;
  std::vector<std::string> parts;
  if (step_wanted && !graph_failure_.empty())
    parts.push_back("step graph failed, stepping eagerly (the events say why)");
  else if (step_wanted && t.tokens > 0)
    parts.push_back(
        tally("step graph", t.tokens_replayed, t.tokens, "tokens", t.step_captures, t.token_skip));
  const GraphedTrainPass* pass = trainer_->graphed_pass();
  if (pass_wanted && pass && !pass->failure().empty())
    parts.push_back("training graph failed, training eagerly (the events say why)");
  else if (pass_wanted && t.passes > 0)
    parts.push_back(
        tally("training graph", t.passes_replayed, t.passes, "passes", t.pass_captures, t.pass_skip));
  if (parts.empty()) return "CUDA graphs on, nothing stepped yet";
  std::string line = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) line += " | " + parts[i];
  return line;
}

std::shared_ptr<Frame> Branch::train_frame() {
  drop_stepped_ahead();  // the training step edits the weights a token ahead would read
  graphed_.reset();      // and that a captured graph read (in place, but a graph is cheap to re-capture)
  // The graph's tally (graph_summary), around the step and outside its time: its pass is made by
  // the first graphed step.
  const bool pass_wanted = trainer_->pass_graph_wanted();
  const std::string pass_skip = pass_wanted ? trainer_->pass_graph_not_applicable() : "";
  const GraphedTrainPass* before = trainer_->graphed_pass();
  const int64_t captured = before ? before->captures() : 0, replayed = before ? before->replays() : 0;
  const auto start = std::chrono::steady_clock::now();
  const TrainStepResult r = trainer_->train_step();
  auto frame = model::train_frame(*trainer_, r, step_ + 1, id_, preset().probe);
  frame->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (pass_wanted) {
    GraphTally& t = graph_tally_;
    const GraphedTrainPass* pass = trainer_->graphed_pass();
    ++t.passes;
    t.passes_replayed += pass ? pass->replays() - (pass == before ? replayed : 0) : 0;
    t.pass_captures += pass ? pass->captures() - (pass == before ? captured : 0) : 0;
    if (!pass_skip.empty()) t.pass_skip = pass_skip;
  }
  return frame;
}

std::vector<int64_t> Branch::layer_heads(int layer, int head) const {
  const LanguageModel& model = trainer_->model();
  if (!model->config().has_memory())
    throw UserError(std::string("this model (model.block = ") + to_string(model->config().block) +
                    ") has no memory layer to reset");
  if (layer >= model->layers())
    throw UserError("layer " + std::to_string(layer) + " does not exist (the model has " +
                    std::to_string(model->layers()) + ")");
  const int64_t heads = model->config().memory_heads;
  if (head >= heads)
    throw UserError("head " + std::to_string(head) + " does not exist (layers have " + std::to_string(heads) + ")");
  if (head >= 0) return {head};
  return {};
}

void Branch::apply(const Command& c) {
  drop_stepped_ahead();
  graphed_.reset();  // every command changes what a step computes or the state it starts from
  using K = Command::Kind;
  const LanguageModel& model = trainer_->model();
  auto each_layer = [&](int layer, const std::function<void(int64_t, MemoryState&)>& f) {
    for (int64_t l = 0; l < model->layers(); ++l)
      if (layer < 0 || layer == l) f(l, inspect_.blocks[static_cast<size_t>(l)].memory);
  };
  switch (c.kind) {
    case K::SetKnob:
      if (set_knobs({c.knob + "=" + c.value})) return;  // a new run: nothing to log for rewinds
      break;
    case K::ResetMomentum: {
      const auto heads = layer_heads(c.layer, c.head);
      each_layer(c.layer, [&](int64_t, MemoryState& s) { s.reset_momentum(heads); });
      break;
    }
    case K::ResetMemory: {
      const auto heads = layer_heads(c.layer, c.head);
      each_layer(c.layer, [&](int64_t l, MemoryState& s) { model->block(l)->memory->reset(s, heads); });
      break;
    }
    case K::InjectNan: {
      const auto heads = layer_heads(c.layer, c.head);
      each_layer(c.layer, [&](int64_t, MemoryState& s) {
        at::Tensor m = s.memory.front().clone();
        if (heads.empty()) m.fill_(std::numeric_limits<double>::quiet_NaN());
        else m.select(1, heads.front()).fill_(std::numeric_limits<double>::quiet_NaN());
        s.memory.front() = m;
      });
      break;
    }
    case K::CorruptBatch: trainer_->corrupt_next_batch(); break;
    case K::NanGate: {
      const std::vector<std::pair<std::string, Gate>> gates{{"retain", Gate::Retain}, {"lr", Gate::Lr}, {"momentum", Gate::Momentum}};
      const auto it = std::find_if(gates.begin(), gates.end(), [&](const auto& g) { return g.first == c.value; });
      if (it == gates.end()) throw UserError("nan gate: '" + c.value + "' is not a gate (retain, lr or momentum)");
      layer_heads(c.layer, c.head);  // checks the indices
      gate_fault_ = {true, it->second, c.layer, c.head};
      break;
    }
    case K::ScaleMomentum: {
      double factor = 0;
      try {
        factor = std::stod(c.value);
      } catch (const std::exception&) {
        throw UserError("scale momentum: '" + c.value + "' is not a number");
      }
      const auto heads = layer_heads(c.layer, c.head);
      each_layer(c.layer, [&](int64_t, MemoryState& s) {
        for (auto& momentum : s.momentum) {
          at::Tensor scaled = momentum.clone();  // replaced, not edited: frames may hold the old one
          if (heads.empty()) scaled.mul_(factor);
          else scaled.select(1, heads.front()).mul_(factor);
          momentum = scaled;
        }
      });
      break;
    }
    default: throw std::logic_error("Branch::apply: not a state command: " + describe(c));
  }
  log_.push_back({step_, c});
}

bool Branch::set_knobs(const std::vector<std::string>& sets) {
  Preset next = parse_preset(preset().toml, preset().name, sets);
  if (!restart_knob_changed(preset(), next).empty()) {
    // A restart knob changes the model's shape or data: the run starts over (step 0).
    start_over(std::make_unique<Trainer>(next));
    return true;
  }
  const EngineConfig& was = preset().engine;
  const bool new_stream = was.inspect_batch != next.engine.inspect_batch || was.probe_seed != next.engine.probe_seed;
  trainer_->apply_live(next);
  if (new_stream) {  // another inspect stream: it starts from its first token
    cursor_ = {};
    sequence_loaded_ = -1;
  }
  detectors_.set_config(next.detect);
  ring_->set_budget(budget_bytes(next.engine.frame_budget_mb));
  return false;
}

void Branch::take_keyframe() {
  Keyframe k;
  k.step = step_;
  k.preset = preset();
  k.trainer = trainer_->snapshot();
  k.inspect = clone_state(inspect_);
  k.cursor = cursor_;
  k.gate_fault = gate_fault_;
  k.detectors = detectors_;
  k.bytes = k.trainer.bytes() + state_bytes(k.inspect);
  if (!keyframes_.empty() && keyframes_.back().step == step_) keyframes_.back() = std::move(k);
  else keyframes_.push_back(std::move(k));

  // Over budget: drop the keyframe closest to its predecessor (never the first or the newest), so
  // the survivors thin out evenly and a rewind re-runs at most a few intervals.
  const int64_t budget = budget_bytes(preset().engine.keyframe_budget_mb);
  while (keyframes_.size() > 2 && keyframe_bytes() > budget) {
    size_t drop = 1;
    for (size_t i = 2; i + 1 < keyframes_.size(); ++i)
      if (keyframes_[i].step - keyframes_[i - 1].step < keyframes_[drop].step - keyframes_[drop - 1].step) drop = i;
    keyframes_.erase(keyframes_.begin() + static_cast<std::ptrdiff_t>(drop));
  }
}

int64_t Branch::keyframe_bytes() const {
  int64_t total = 0;
  for (const auto& k : keyframes_) total += k.bytes;
  return total;
}

int64_t Branch::earliest_keyframe() const { return keyframes_.empty() ? step_ : keyframes_.front().step; }

const Keyframe& Branch::keyframe_at_or_before(int64_t step) const {
  const Keyframe* best = nullptr;
  for (const auto& k : keyframes_)
    if (k.step <= step) best = &k;
  if (!best) throw UserError("no keyframe at or before step " + std::to_string(step));
  return *best;
}

void Branch::restore(const Keyframe& k) {
  drop_stepped_ahead();
  graphed_.reset();
  if (!restart_knob_changed(preset(), k.preset).empty()) trainer_ = std::make_unique<Trainer>(k.preset);
  else trainer_->apply_live(k.preset);
  trainer_->restore(k.trainer);
  inspect_ = clone_state(k.inspect);
  cursor_ = k.cursor;
  // The sequence loaded may be another stream's (an engine.probe_seed or engine.inspect_batch
  // changed after the keyframe) with the same number: loaded again.
  sequence_loaded_ = -1;
  gate_fault_ = k.gate_fault;
  detectors_ = k.detectors;
  step_ = k.step;
  ring_->truncate_after(k.step);
  ring_->set_budget(budget_bytes(k.preset.engine.frame_budget_mb));
}

void Branch::replay_to(int64_t step, std::vector<Event>& events, const std::function<void(const Frame&)>& on_frame) {
  // The logged commands after `step` belong to the abandoned future.
  std::vector<LoggedCommand> log;
  for (auto& entry : log_)
    if (entry.step < step) log.push_back(std::move(entry));
  log_.clear();
  size_t next = 0;
  while (next < log.size() && log[next].step < step_) log_.push_back(log[next++]);
  while (step_ < step) {
    while (next < log.size() && log[next].step == step_) apply(log[next++].command);
    const auto frame = advance(events);
    if (on_frame) on_frame(*frame);
  }
}

int64_t Branch::rewind(int64_t step, std::vector<Event>& events, const std::function<void(const Frame&)>& on_frame) {
  if (step < 0 || step > step_)
    throw UserError("rewind: step " + std::to_string(step) + " is outside this timeline (0.." + std::to_string(step_) + ")");
  const Keyframe& k = keyframe_at_or_before(step);
  const int64_t from = k.step;
  restore(k);
  replay_to(step, events, on_frame);
  return from;
}

std::unique_ptr<Branch> Branch::fork(int id, int64_t step, const std::vector<std::string>& sets,
                                     std::vector<Event>& events, const std::function<void(const Frame&)>& on_frame) const {
  if (step < 0 || step > step_)
    throw UserError("fork: step " + std::to_string(step) + " is outside this timeline (0.." + std::to_string(step_) + ")");
  // The fork's own change: live knobs only, or the two timelines would not share a past. Checked
  // before the re-run, which a refused fork need not pay for.
  const Preset changed = parse_preset(preset().toml, preset().name, sets);
  const std::string restart = restart_knob_changed(preset(), changed);
  if (!restart.empty()) throw UserError("fork: " + restart + " needs a restart; a fork can change live knobs only");
  const Keyframe& k = keyframe_at_or_before(step);
  auto branch = std::make_unique<Branch>(id, k.preset);
  branch->restore(k);
  branch->keyframes_ = {k};
  for (const auto& entry : log_)
    if (entry.step >= k.step && entry.step < step) branch->log_.push_back(entry);
  branch->replay_to(step, events, on_frame);
  for (const auto& set : sets) {
    const auto eq = set.find('=');
    branch->apply(Command::set_knob(set.substr(0, eq), set.substr(eq + 1)));
  }
  return branch;
}

}  // namespace memscope::model
