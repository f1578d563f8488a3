// Branch: one timeline the engine runs (DESIGN "Rewind and fork"). It owns the trainer (model,
// optimiser, task), the inspect stream and its memory state, the probes and detectors, the
// keyframes and the frame ring. Only the engine thread touches a branch; readers see its ring.
//
// A step is one training step (engine.mode = train), one token of the probe stream (inspect), or
// either (train+inspect: every engine.inspect_every training steps the probe sequence is stepped
// again with the current weights). Step numbers count from 1; keyframe k holds the state after k
// steps, and rewinding to s restores the newest keyframe at or before s, then re-runs the steps and
// re-applies the logged state commands up to s. With the same preset, seed and commands, the
// frames are bit-identical on CPU (their wall-clock fields aside).
#pragma once
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config/preset.h"
#include "model/engine/command.h"
#include "model/engine/frame_ring.h"
#include "model/engine/overlap_gauge.h"
#include "model/nn/language_model.h"
#include "model/probe/detectors.h"
#include "model/probe/event.h"
#include "model/probe/inner_backward.h"
#include "model/probe/snapshot_buffers.h"
#include "model/train/trainer.h"
#include "model/util/side_thread.h"

namespace memscope::model {

class GraphedStep;  // model/nn/graphed_step.h

// A planted NaN gate (Command::NanGate) that the next inspect step reads, then forgets.
struct GateFault {
  bool pending = false;
  Gate gate = Gate::Lr;
  int layer = -1, head = -1;  // −1: all
};

// Where the inspect stream is.
struct InspectCursor {
  int64_t sequence = 0;     // probe sequence number (its seed is mixed from engine.probe_seed)
  int64_t token_index = 0;  // next token to feed inside it
  int64_t remaining = 0;    // train+inspect: tokens left in the current re-step (0: training)
};

struct Keyframe {
  int64_t step = 0;
  Preset preset;  // the knobs in force
  TrainerSnapshot trainer;
  LmState inspect;  // cloned
  InspectCursor cursor;
  GateFault gate_fault;  // planted and not yet stepped: a rewind to here plants it again
  Detectors detectors;
  int64_t bytes = 0;
};

// What a branch's side thread does while a probed inspect token is measured (engine.overlap, CPU
// models; README "The probes' own cost on AVX2, and the probes on the side thread"):
// - Probes: it measures this token's probes while the engine thread steps the next token. The
//   step keeps the engine thread's caches and allocations: on one timeline demo-mqar-titans read
//   +28–38% against +35–56% with NextToken, demo-mqar +14–16% against +20–26% (AMD VM).
// - NextToken: it steps the next token while the engine thread measures the probes. With forks
//   the steps of one timeline then fill the other core while the engine thread measures and steps
//   the others: demo-mqar with one fork read −13.4% with NextToken for both, −5.3% with one of
//   each, and +17.2% with Probes for both.
enum class SideJob { Probes, NextToken };

// What the engine asks of each timeline's side thread when it steps `timelines` of them together.
inline SideJob side_job_for(size_t timelines) { return timelines == 1 ? SideJob::Probes : SideJob::NextToken; }

// While a snapshot frame's probes run on the side thread (SideJob::Probes), the engine thread steps
// the tokens after it (Branch::step_further): until they are done (WhileProbesRun, the engine's
// way), up to kMaxStepsFurther tokens whether or not they are (UpToTheCap), or not at all (Off).
enum class StepFurther { WhileProbesRun, UpToTheCap, Off };

// One inspect token through the model, before its probes are measured: made when its step comes,
// or ahead of time (engine.overlap) while the token before it was measured, on the engine thread
// (SideJob::Probes) or the branch's side thread (SideJob::NextToken), or several tokens before its
// turn while a snapshot frame's probes ran aside (Branch::step_further).
struct SteppedToken {
  int64_t step = 0;                              // the engine step it is
  int64_t sequence = 0, token_index = 0;         // the token it stepped
  LmState state;                                 // after the step
  LmStepOutput out;
  std::vector<std::vector<at::Tensor>> before;   // probed: per layer, the memory weights before it
  std::optional<LmState> probed;                 // probed with engine.overlap: the probes' copy of `state`
  double seconds = 0;                            // the step's own time
  bool graphed = false;                          // replayed through a CUDA graph (engine.cuda_graph)
  std::string graph_skip;  // offered a graph and not taken: why (GraphedStep::not_applicable)
  bool stepped_further = false;  // by Branch::step_further
};

class Branch {
 public:
  // A fresh run of `preset`, or the run saved in `checkpoint` (with `sets` on its stored preset).
  Branch(int id, const Preset& preset);
  Branch(int id, const std::filesystem::path& checkpoint, const std::vector<std::string>& sets);
  ~Branch();  // waits for a token being stepped ahead

  int id() const { return id_; }
  int64_t step() const { return step_; }
  const Preset& preset() const { return trainer_->preset(); }
  const Trainer& trainer() const { return *trainer_; }
  std::shared_ptr<FrameRing> ring() const { return ring_; }

  // One step; its frame goes to the ring and is returned, its detector events to `events`.
  std::shared_ptr<const Frame> advance(std::vector<Event>& events);
  // What the side thread does for this timeline from its next probed inspect step (Probes until set).
  // A change drops the tokens stepped further (further_), which only SideJob::Probes steps.
  void set_side_job(SideJob job);

  // A state command between steps (set knob, resets, NaN injection); logged for rewinds.
  // Restart knobs start the run over. Throws UserError for a bad knob, layer or head.
  void apply(const Command& command);

  // Back to `step` (≤ step()): the frames after the keyframe are dropped and re-made. Returns the
  // keyframe's step (everything after it was re-run).
  int64_t rewind(int64_t step, std::vector<Event>& events, const std::function<void(const Frame&)>& on_frame);

  // A new branch `id` equal to this one at `step`, with `sets` (live knobs only) applied there.
  std::unique_ptr<Branch> fork(int id, int64_t step, const std::vector<std::string>& sets, std::vector<Event>& events,
                               const std::function<void(const Frame&)>& on_frame) const;

  // Starts this timeline over at the weights from before training step `train_step` (re-running
  // the trainer from where it is), stepping that step's batch in inspect mode with its chunk
  // (engine.inspect_batch). Throws UserError when the step is not after the weights or beyond the run.
  void step_into(int64_t train_step, const std::function<void(const std::string&)>& progress = {});

  // The oldest step a rewind can reach and the keyframes' memory.
  int64_t earliest_keyframe() const;
  int64_t keyframe_bytes() const;
  size_t keyframes() const { return keyframes_.size(); }
  // Inspect tokens stepped ahead and taken so far, on either thread (engine.overlap), for tests and benches.
  int64_t tokens_stepped_ahead() const { return stepped_ahead_; }
  // Of those, the ones stepped further while a snapshot frame's probes ran aside (step_further).
  int64_t tokens_stepped_further() const { return taken_further_; }
  // For tests and benches: whether tokens are stepped further (StepFurther), so that tests can
  // count them whatever this machine's timing, and benches can measure what they save.
  void set_step_further(StepFurther when) { step_further_ = when; }
  // The most tokens in hand beyond the next one (further_), and the most bytes they hold: each its
  // state and, when probed, the probes' copy of what the step replaced (held_bytes in branch.cpp).
  // demo-mqar-hope's state is 2.9 MB, its copy 2.6 MB on a snapshot token and none on the others,
  // so 16 fit at the default cadence; at d_model 512 a state is 185 MB, and none is held.
  static constexpr size_t kMaxStepsFurther = 16;
  static constexpr int64_t kMaxBytesFurther = int64_t{64} << 20;
  // Whether handing the side thread its job has paid lately, and the probed tokens whose job this
  // thread did itself while it did not (model/engine/overlap_gauge.h), for tests and benches.
  const OverlapGauge& overlap_gauge() const { return overlap_gauge_; }
  OverlapGauge& overlap_gauge() { return overlap_gauge_; }
  // Inspect tokens replayed through a CUDA graph (engine.cuda_graph), for tests and the status line.
  int64_t tokens_graphed() const { return graphed_tokens_; }
  // What the CUDA graphs have done for this model, in one line for the status line: "step graph
  // 510/512 tokens, 4 captures", or why a graph is not taken. Empty where no graph is asked for
  // (a CPU model); "CUDA graphs off (engine.cuda_graph)" on a CUDA model with the knob off.
  std::string graph_summary() const;
  // For tests, until the run starts over: the inspect step through GraphedStep(capture) and the
  // training pass through Trainer::use_graphed_pass(capture), on any device and whatever the knob.
  // On a CPU model capture=true fails, as a capture can.
  void use_graphs(bool capture);

 private:
  struct LoggedCommand {
    int64_t step;
    Command command;
  };

  void start_over(std::unique_ptr<Trainer> trainer);
  void take_keyframe();
  void restore(const Keyframe& k);
  void replay_to(int64_t step, std::vector<Event>& events, const std::function<void(const Frame&)>& on_frame);
  const Keyframe& keyframe_at_or_before(int64_t step) const;
  // Returns true when a restart knob changed and the run started over.
  bool set_knobs(const std::vector<std::string>& sets);
  void ensure_sequence_loaded(int64_t sequence);
  int64_t inspect_chunk() const;  // the chunk b the inspect stream steps with (1: the exact step)

  std::shared_ptr<Frame> train_frame();
  // Its detectors' events are added to `events` (a train frame's are added by advance()).
  std::shared_ptr<Frame> inspect_frame(std::vector<Event>& events);
  // After a probed inspect step: whether the next token may be stepped ahead (engine.overlap, CPU
  // models): nothing is planted, and it is of the same probe sequence, or the next one's first
  // token stepped on this thread (SideJob::Probes, step_ahead_here). Makes the side thread.
  bool can_step_ahead();
  // Whether a probed step also copies its state for the probes (copy_for_probes in branch.cpp):
  // where they may run on another thread than the steps.
  bool copies_for_probes() const;
  SteppedToken& start_token_ahead();  // ahead_, with the step, sequence and token it is for
  // Token `index` of the sequence loaded stepped on this thread from `from`, as engine step `step`
  // (probed, and copied for a snapshot, as the preset has that step).
  SteppedToken step_token_here(const LmState& from, int64_t index, int64_t step) const;
  // The next token stepped now, on this thread (SideJob::Probes; a failed step is kept for its own).
  // A new sequence's first token loads that sequence and steps from the initial state, which
  // inspect_frame() makes inspect_ when it takes the token.
  void step_ahead_here();
  // The next token started on the side thread when can_step_ahead() and a spare core is free
  // (SideJob::NextToken).
  void step_ahead_aside();
  // The token after the last one in hand stepped on this thread, from that one's state, into
  // further_ (SideJob::Probes, while a snapshot frame's probes run aside). Only within the sequence
  // loaded, in inspect mode, within kMaxStepsFurther and kMaxBytesFurther, after a token that stepped.
  // Returns whether it stepped one; a step that throws is thrown away, to be stepped and throw at its turn.
  bool step_further();
  // The token stepped ahead when it is `step`'s, else nothing; then the first token stepped further
  // is in hand (or none is). A token that is not `step`'s drops the ones after it.
  std::optional<SteppedToken> take_stepped_ahead(int64_t step);
  // Before anything changes the weights, the state or the knobs: the token ahead and the tokens
  // stepped further are thrown away.
  void drop_stepped_ahead();
  std::vector<int64_t> layer_heads(int layer, int head) const;  // checks the indices

  int id_;
  std::unique_ptr<Trainer> trainer_;
  LmState inspect_;
  InspectCursor cursor_;
  GateFault gate_fault_;
  at::Tensor sequence_tokens_;                  // the current probe sequence, [T] on the model's device
  std::vector<int64_t> host_tokens_, host_targets_;  // the same on the host (targets −1: not scored)
  int64_t sequence_loaded_ = -1;
  std::optional<InnerBackward> inner_backward_;  // stepping into a training step: this row's backward norms
  Detectors detectors_;
  SnapshotBuffers snapshot_buffers_;  // the next snapshot frame's, made ahead by the engine thread
  // The last probed frame, and the last one with snapshots: how much room the next one's probes
  // need (reserve_like in branch.cpp).
  std::shared_ptr<const Frame> last_probed_, last_snapshots_;
  std::vector<Keyframe> keyframes_;
  std::vector<LoggedCommand> log_;
  std::shared_ptr<FrameRing> ring_;
  int64_t step_ = 0;
  SideJob side_job_ = SideJob::Probes;
  // The token stepped ahead: with SideJob::NextToken written by the side thread between try_run()
  // and wait(); ahead_error_ is a step ahead that threw on this thread.
  std::optional<SteppedToken> ahead_;
  std::exception_ptr ahead_error_;
  bool ahead_in_hand_ = false;
  bool ahead_aside_ = false;  // the token in hand was stepped by the side thread (SideJob::NextToken)
  // The tokens after the one in hand, in order, stepped on this thread while a snapshot frame's
  // probes ran aside (step_further), each from the state of the one before.
  std::deque<SteppedToken> further_;
  int64_t taken_further_ = 0;
  StepFurther step_further_ = StepFurther::WhileProbesRun;
  std::shared_ptr<SteppedToken> spent_;  // the last token's, until the next token ahead drops it
  int64_t stepped_ahead_ = 0;
  int64_t graphed_tokens_ = 0;
  std::unique_ptr<SideThread> side_;  // made on first use
  OverlapGauge overlap_gauge_;        // whether the side thread is there when handed a job, either job
  // A CUDA model's inspect step as a CUDA graph (engine.cuda_graph); made on first use, dropped by
  // anything that changes what a step computes (a command, a training step, a restore).
  std::unique_ptr<GraphedStep> graphed_;
  std::string graph_failure_;   // why a capture failed: this model steps without graphs until start_over
  std::optional<bool> graphed_step_forced_;  // use_graphs' capture
  GraphedStep* graphed_step();  // null where graphs do not apply (the CPU, the knob off, no CUDA build)
  bool step_graph_wanted() const;  // engine.cuda_graph on a CUDA model, or use_graphs
  // What the graphs have done since the model was made (start_over), for graph_summary().
  struct GraphTally {
    int64_t tokens = 0, tokens_replayed = 0, step_captures = 0;  // inspect tokens offered the step's graph
    int64_t passes = 0, passes_replayed = 0, pass_captures = 0;  // training passes offered the pass's graph
    std::string token_skip, pass_skip;  // why the last one offered and not taken was not
  };
  GraphTally graph_tally_;
  // What the events have said of the graphs, so each is said once per model (start_over).
  struct GraphNotices {
    bool step_captured = false, step_failed = false, pass_captured = false, pass_failed = false;
  };
  GraphNotices graph_notices_;
  // The graphs' news since the last frame, as Notice events: the first capture of the step's and
  // of the training pass's, and a capture that failed. A GUI user does not see stderr.
  void note_graphs(int64_t step, std::vector<Event>& events);
};

}  // namespace memscope::model
