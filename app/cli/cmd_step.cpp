// memscope-cli step: the debugger without a window. The engine steps a probe stream token by
// token with the preset's (or a checkpoint's) weights and prints the probes of every probed step;
// breakpoints stop the run and print the event that fired.
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "app/cli/commands.h"
#include "app/cli/interrupt.h"
#include "app/cli/serve.h"
#include "model/engine/engine.h"
#include "model/session/output_check.h"
#include "model/session/replay.h"
#include "model/session/session_reader.h"
#include "model/session/session_writer.h"
#include "model/probe/frame_json.h"
#include "model/util/compute_threads.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct StepOptions {
  std::string preset = "demo-mqar";
  std::string ckpt;
  std::vector<std::string> sets;
  int64_t tokens = 64;
  int64_t probe_every = 0;
  std::string break_on;
  std::string record;
  std::string replay;
  std::string session;     // --session DIR with --train-step: the recorded run's preset
  int64_t train_step = 0;  // --train-step S: step into training step S
  bool tokens_given = false, preset_given = false;
  bool json = false;
  int threads = 0;
  ServeFlags serve;  // --serve: viewers drive the engine (issue 22)
};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

// Prints every probed frame (JSON lines or one human line each) and the events worth a look.
class Printer : public model::FrameSink {
 public:
  explicit Printer(bool json) : json_(json) {}

  void on_frame(const model::Frame& f) override {
    if (f.kind == model::FrameKind::Inspect && f.target >= 0 && std::isfinite(f.loss)) {
      loss_sum_ += f.loss;
      ++targets_;
      correct_ += f.predicted == f.target;
    }
    const bool hope = f.cms_levels > 0 || !f.selfmod_error.empty();  // HOPE probes (issue 8)
    if (f.layers == 0 && !hope && f.kind == model::FrameKind::Inspect) return;  // not probed at this step
    if (json_) {
      std::cout << model::frame_to_json(f).dump() << '\n';
      return;
    }
    char line[160];
    std::snprintf(line, sizeof line, "step %5lld  seq %3lld tok %3lld  %5lld → %-5s loss %-7s", static_cast<long long>(f.step),
                  static_cast<long long>(f.sequence), static_cast<long long>(f.token_index),
                  static_cast<long long>(f.token), f.predicted >= 0 ? std::to_string(f.predicted).c_str() : "-",
                  std::isfinite(f.loss) ? format(f.loss).c_str() : "-");
    std::cout << line;
    for (int l = 0; l < f.layers; ++l) {
      double norm = 0, erank = 0, ns = std::nan(""), gain = 0;
      for (int h = 0; h < f.heads; ++h) {
        norm += f.weight(l, h, 0, model::WeightMetric::NormM) / f.heads;
        erank += f.weight(l, h, 0, model::WeightMetric::Erank) / f.heads;
        const double e = f.weight(l, h, 0, model::WeightMetric::NsError);  // NaN: not muon
        if (std::isfinite(e)) ns = std::isfinite(ns) ? std::max(ns, e) : e;
        gain += f.head(l, h, model::HeadMetric::Gain) / f.heads;
      }
      std::cout << " | L" << l << " ‖M‖ " << format(norm) << " erank " << format(erank);
      if (std::isfinite(ns)) std::cout << " ns " << format(ns);
      std::cout << " gain " << format(gain);
    }
    // HOPE: each CMS level's ‖W‖ with a * where it updated at this token, and the main memory's target error.
    const size_t hope_layers = f.cms_levels > 0 ? f.cms_norm.size() / static_cast<size_t>(f.cms_levels) : f.selfmod_error.size() / 5;
    for (size_t l = 0; l < hope_layers; ++l) {
      std::cout << " | L" << l;
      if (f.cms_levels > 0) {
        std::cout << " cms";
        for (int k = 0; k < f.cms_levels; ++k) {
          const size_t i = l * static_cast<size_t>(f.cms_levels) + static_cast<size_t>(k);
          std::cout << ' ' << format(f.cms_norm[i]) << (f.cms_tick[i] > 0 ? "*" : "");
        }
      }
      if (!f.selfmod_error.empty()) std::cout << " target err " << format(f.selfmod_error[l * 5 + 4]);
      if (!f.selfmod_retention.empty())
        std::cout << " retention [" << format(f.selfmod_retention[l * 2]) << ", " << format(f.selfmod_retention[l * 2 + 1]) << "]";
    }
    std::cout << '\n';
  }

  void on_event(const model::Event& e) override {
    if (e.kind == model::EventKind::Command || !show_events_) return;
    if (json_) std::cout << model::event_to_json(e).dump() << '\n';
    else std::cout << "[" << model::to_string(e.kind) << "] step " << e.step << ": " << e.message << '\n';
    if (e.kind == model::EventKind::Error) error_ = e.message;
  }

  const std::string& error() const { return error_; }
  // The summed loss, count and hits of every scored token stepped (the step into a training step).
  double loss_sum() const { return loss_sum_; }
  int64_t targets() const { return targets_; }
  int64_t correct() const { return correct_; }
  // Off while a command's own failure is about to be reported as the CLI's error line.
  void show_events(bool show) { show_events_ = show; }

 private:
  static std::string format(double v) {
    if (std::isnan(v)) return "nan";
    char s[32];
    std::snprintf(s, sizeof s, "%.3g", v);
    return s;
  }
  bool json_;
  std::atomic<bool> show_events_{true};  // set by the main thread, read on the engine thread
  std::string error_;
  double loss_sum_ = 0;  // engine thread while running; read after it stops
  int64_t targets_ = 0, correct_ = 0;
};

// --session DIR --train-step S: the session must hold training frames, S among them. Returns the
// loss its main timeline recorded for step S (NaN when that frame was not kept).
double recorded_train_loss(const std::string& dir, int64_t train_step) {
  const model::SessionReader reader(dir);
  int64_t last = 0;
  double loss = std::nan("");
  for (int timeline = 0; timeline < reader.timelines(); ++timeline) {
    const auto steps = reader.steps(timeline);
    for (size_t i = 0; i < steps.size(); ++i) {
      const model::Frame f = reader.frame_at(timeline, i);
      if (f.kind != model::FrameKind::Train) continue;
      last = std::max(last, f.train_step);
      if (timeline == 0 && f.train_step == train_step) loss = f.loss;
    }
  }
  if (last == 0)
    throw model::UserError("session " + reader.dir().string() +
                           " has no training frames (it was recorded in inspect mode)");
  if (train_step > last)
    throw model::UserError("--train-step " + std::to_string(train_step) + " is beyond the run: session " +
                           reader.dir().string() + " trained to step " + std::to_string(last));
  return loss;
}

// The batch's loss recomputed token by token against the trainer's for the same step and weights.
void print_step_into_summary(const model::StepIntoReference& into, double recorded, const Printer& p, bool json) {
  const double loss = p.targets() > 0 ? p.loss_sum() / static_cast<double>(p.targets()) : std::nan("");
  const double acc = p.targets() > 0 ? static_cast<double>(p.correct()) / static_cast<double>(p.targets()) : std::nan("");
  const bool whole = p.targets() == into.targets;
  if (json) {
    nlohmann::json j = {{"step_into", into.train_step}, {"loss", loss},        {"acc", acc},
                        {"targets", p.targets()},       {"whole_batch", whole}, {"trainer_loss", into.loss},
                        {"trainer_acc", into.acc}};
    if (std::isfinite(recorded)) j["recorded_loss"] = recorded;
    std::cout << j.dump() << '\n';
    return;
  }
  std::cout << "training step " << into.train_step << ": loss " << loss << " and accuracy " << acc << " over " << p.targets()
            << " target tokens";
  if (whole) std::cout << " (the trainer's, same weights and batch: " << into.loss << ", |difference| " << std::abs(loss - into.loss) << ")";
  else std::cout << " (part of the batch; the whole batch has " << into.targets << ", the trainer's loss " << into.loss << ")";
  // A session recorded from a fresh run re-runs to the same weights; one started from elsewhere does not.
  if (std::isfinite(recorded)) {
    std::cout << "; recorded in the session: " << recorded;
    if (std::abs(recorded - into.loss) > 1e-5 * std::max(1.0, std::abs(recorded)))
      std::cout << " (differs: the recorded run did not start from this preset's step 0, or its knobs changed on the way)";
  }
  std::cout << '\n';
}

void run_step(const StepOptions& o) {
  using namespace memscope::model;
  set_compute_threads(o.threads);  // ATen and OpenBLAS (model/util/compute_threads.h)
  EngineOptions options;
  options.preset = o.preset;
  options.checkpoint = o.ckpt;
  options.sets = o.sets;
  options.train_step = o.train_step;
  double recorded_loss = std::nan("");  // the session's training frame for --train-step, when there is one
  if (!o.session.empty()) {
    if (o.train_step == 0) throw UserError("--session needs --train-step S (to play a recorded session, use --replay)");
    if (o.preset_given) throw UserError("--session takes the recorded run's preset; --preset does not apply");
    recorded_loss = recorded_train_loss(o.session, o.train_step);
    options.session = o.session;
  }
  if (o.train_step > 0 && !o.replay.empty()) throw UserError("--train-step steps a model; it does not apply to --replay");
  options.sets.push_back("engine.mode=inspect");
  if (o.probe_every > 0) options.sets.push_back("probe.every=" + std::to_string(o.probe_every));
  std::vector<Breakpoint> breakpoints;
  for (const auto& text : split(o.break_on, ',')) breakpoints.push_back(parse_breakpoint(text));

  // The recording's directory is checked before the model is built (exists, writable, has room).
  if (!o.record.empty())
    check_output({"--record", session_dir_for(o.record), FileKind::Session, 16u << 20}, {o.replay}, false);
  // A recorded session plays through the same interface as the live engine (DESIGN principle 1).
  std::unique_ptr<TimelineSource> source;
  const Engine* live = nullptr;
  if (o.replay.empty()) {
    options.progress = [](const std::string& line) { std::cerr << line << '\n'; };
    auto engine = std::make_unique<Engine>(options);
    live = engine.get();
    source = std::move(engine);
  } else {
    if (!o.ckpt.empty() || !o.sets.empty() || o.probe_every > 0 || o.preset_given)
      throw UserError("step --replay plays what was recorded; --preset, --ckpt, --set and --probe-every do not apply");
    auto replay = std::make_unique<Replay>(o.replay);
    for (const auto& d : replay->reader().damage())
      std::cerr << "memscope-cli: warning: " << replay->reader().dir().string() << "/" << d.file << ": " << d.reason
                << " (skipped)\n";
    source = std::move(replay);
  }
  TimelineSource& engine = *source;
  auto printer = std::make_shared<Printer>(o.json);
  engine.add_sink(printer);
  std::shared_ptr<RemoteServer> server;
  if (o.serve.serving())
    server = serve(engine, o.serve, (o.replay.empty() ? "step " : "replay ") + engine.status().preset.name);
  engine.start();
  if (server) server->start();
  for (const auto& b : breakpoints) {
    Command c{Command::Kind::AddBreakpoint};
    c.breakpoint = b;
    engine.post(c);
  }
  // A recording that cannot start (the directory is taken) stops here, before any step runs.
  auto post_and_check = [&](Command c) {
    printer->show_events(false);
    engine.post(std::move(c));
    engine.wait_idle();
    printer->show_events(true);
    const std::string error = engine.status().last_error;
    if (!error.empty()) throw UserError(error);
  };
  if (!o.record.empty()) {
    post_and_check(Command::start_recording(o.record));
  }
  // A replay without --tokens plays to the end of the recording. Ctrl+C or SIGTERM pauses after
  // the step in flight; the recording is then closed as on a normal end.
  catch_interrupts();
  const size_t events_before = engine.events().size();
  const StepIntoReference into = live ? live->step_into_reference() : StepIntoReference{};
  // Stepping into a training step covers its whole batch unless --tokens says otherwise.
  const int64_t tokens = into.train_step > 0 && !o.tokens_given ? into.tokens : o.tokens;
  // Served, the engine steps --tokens if given, then what the viewers ask, until Ctrl+C.
  if (!server || o.tokens_given)
    engine.post(!o.replay.empty() && !o.tokens_given ? Command::run() : Command::steps(tokens));
  bool paused_by_signal = false;
  while (!engine.wait_idle_for(0.1) || (server && !interrupted()))
    if (interrupted() && !paused_by_signal) {
      engine.post(Command{Command::Kind::Pause});
      paused_by_signal = true;
    }
  // What stopped the run early, if anything did: the first error (a NaN, a failing disk), not a
  // breakpoint the user asked for.
  std::string stopped_by;
  bool breakpoint_fired = false;
  for (const Event& e : engine.events(events_before)) {
    breakpoint_fired |= e.kind == EventKind::Breakpoint;
    if (e.kind == EventKind::Error && stopped_by.empty()) stopped_by = e.message;
  }
  // --break-on nan stops on a NaN as asked; a step that failed is an error whatever was asked.
  if (breakpoint_fired && stopped_by.find(" failed: ") == std::string::npos) stopped_by.clear();
  const auto steps = engine.status().steps;
  const std::string at = "step " + std::to_string(steps.empty() ? 0 : steps.front());
  if (!o.record.empty()) {
    const std::string dir = engine.status().recording;
    post_and_check(Command{Command::Kind::StopRecording});
    std::cerr << "recorded " << dir << " (memscope-cli inspect " << dir << ")\n";
  }
  if (server) server->stop("the run was stopped at " + at);
  engine.stop();
  if (into.train_step > 0) print_step_into_summary(into, recorded_loss, *printer, o.json);
  std::cout.flush();
  if (interrupted()) throw Interrupted("interrupted at " + at);
  // A step that failed or paused on an error is an error for scripts; a replay only shows
  // recorded ones.
  if (o.replay.empty() && !stopped_by.empty() && !server) throw UserError("stopped at " + at + ": " + stopped_by);
}

}  // namespace

void register_step(CLI::App& app) {
  auto o = std::make_shared<StepOptions>();
  CLI::App* cmd = app.add_subcommand("step", "Step a probe stream token by token and print the memory probes");
  cmd->add_option("--preset,-p", o->preset, "Preset name or .toml path (default demo-mqar)")
      ->each([o](const std::string&) { o->preset_given = true; });
  cmd->add_option("--ckpt,-c", o->ckpt, "Step with the weights of this checkpoint (its preset; --preset is ignored)");
  cmd->add_option("--set,-s", o->sets, "Knob override KEY=VALUE (repeatable; see `memscope-cli knobs`)");
  cmd->add_option("--tokens,-n", o->tokens, "Tokens to step (a replay: all of them)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->each([o](const std::string&) { o->tokens_given = true; });
  cmd->add_option("--probe-every", o->probe_every, "Probe every K tokens (default: probe.every)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--break-on", o->break_on,
                  "Stop at the first of these, comma-separated: nan, spike, ns_error, ns_error>X, norm_growth, any, step==N");
  cmd->add_option("--train-step", o->train_step,
                  "Step into training step S: its batch, row by row, with the weights from before it (rebuilt by "
                  "re-running from --ckpt, --session's preset or --preset's start) and the trainer's chunk form")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--session", o->session, "With --train-step: the run a session (NAME.memscope) recorded");
  cmd->add_option("--replay", o->replay, "Step a recorded session (NAME.memscope) instead of a model; same output and breakpoints");
  cmd->add_option("--record", o->record, "Record the session to DIR (NAME.memscope; see memscope-cli inspect/export)");
  cmd->add_flag("--json", o->json, "One JSON object per probed step (and per event)");
  cmd->add_option("--threads", o->threads, "Torch CPU threads")->check(CLI::Range(1, 1024));
  add_serve_flags(cmd, o->serve);
  cmd->callback([o] { run_step(*o); });
}

}  // namespace memscope::app
