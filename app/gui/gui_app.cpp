#include "app/gui/gui_app.h"

#include <GLFW/glfw3.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "app/gui/keys.h"
#include "app/gui/main_layout.h"
#include "app/gui/matrix_textures.h"
#include "model/config/knobs.h"
#include "model/config/preset.h"
#include "model/engine/engine.h"
#include "model/remote/remote_source.h"
#include "model/session/output_check.h"
#include "model/session/replay.h"
#include "model/session/session_writer.h"
#include "model/session/session_export.h"
#include "model/util/errors.h"
#include "viz/app_window.h"

namespace memscope::app {
namespace {

std::string timestamp() {
  char buffer[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buffer, sizeof buffer, "%Y%m%d-%H%M%S", std::localtime(&now));
  return buffer;
}


// Wakes the main loop when a source publishes, so an idle window sleeps until there is news.
class WakeSink : public model::FrameSink {
 public:
  void on_frame(const model::Frame&) override { viz::wake_main_loop(); }
  void on_event(const model::Event&) override { viz::wake_main_loop(); }
};

std::unique_ptr<Run> started(std::unique_ptr<model::TimelineSource> source, std::string label, bool live) {
  auto run = std::make_unique<Run>();
  run->label = std::move(label);
  run->live = live;
  source->add_sink(std::make_shared<WakeSink>());
  source->start();
  run->source = std::move(source);
  run->poll();
  return run;
}

}  // namespace

std::unique_ptr<Run> make_live_run(const std::string& preset, const std::vector<std::string>& sets,
                                   const std::string& label, const std::string& checkpoint, int64_t train_step) {
  model::EngineOptions options;
  options.preset = preset;
  options.sets = sets;
  options.checkpoint = checkpoint;
  options.train_step = train_step;
  return started(std::make_unique<model::Engine>(options), label, true);
}

// What a recording lost, for the banner when it opens ("" when it is whole): the replay skips
// damaged chunks and plays the rest, and the user should know before seeking into a hole.
std::string damage_summary(const model::SessionReader& reader) {
  const auto& damage = reader.damage();
  const auto& loss = reader.loss();
  if (damage.empty() && loss.closed) return "";
  std::string text = "session " + reader.dir().filename().string() + ": ";
  if (!damage.empty())
    text += std::to_string(damage.size()) + " damaged file(s) skipped (" + damage.front().file + ": " +
            damage.front().reason + (damage.size() > 1 ? "; more in `memscope-cli inspect`" : "") + ")";
  if (!loss.closed) text += std::string(damage.empty() ? "" : "; ") + "the recording was not closed";
  if (loss.first_step_lost > 0)
    text += "; steps " + std::to_string(loss.first_step_lost) + " to " + std::to_string(loss.last_step_lost) + " are missing";
  return text + "; everything else plays";
}

std::unique_ptr<Run> make_replay_run(const std::string& path, std::string* damage, bool follow) {
  auto replay = std::make_unique<model::Replay>(path, follow);
  // A recording in progress is not closed yet, and that is not damage.
  if (damage && !(follow && !replay->reader().info().closed)) *damage = damage_summary(replay->reader());
  const auto& info = replay->reader().info();
  // A data-parallel run's session is rank 0's; its frames are the whole global batch's steps.
  const std::string label = std::string(follow ? "following " : "session ") + replay->reader().dir().filename().string() +
                            (info.world_size > 1 ? " (trained on " + std::to_string(info.world_size) + " ranks)" : "");
  auto run = started(std::move(replay), label, false);
  if (follow) run->source->post(model::Command::run());  // new frames show as they land
  return run;
}

std::unique_ptr<Run> make_remote_run(const std::string& address, const std::string& token) {
  model::AttachOptions o;
  o.endpoint = model::parse_attach_address(address);
  o.token = token;
  o.client = "memscope (pid " + std::to_string(::getpid()) + ")";
  auto source = std::make_unique<model::RemoteSource>(o);
  const model::Welcome welcome = source->welcome();
  return started(std::move(source), "attached " + welcome.label + " at " + o.endpoint.text(), true);
}

GuiApp::GuiApp(const GuiOptions& options) : options_(options), textures_(std::make_unique<Textures>()) {
  view_.device_line = options.device_line;
  if (!options.attach.empty()) {
    runs_.push_back(make_remote_run(options.attach, options.token));
  } else if (!options.session.empty()) {
    std::string damage;
    runs_.push_back(make_replay_run(options.session, &damage, options.follow));
    if (!damage.empty()) show_error(damage);
  } else if (!options.checkpoint.empty()) {
    // A trained run: its own preset, no compare runs (they would start untrained).
    const std::string name = std::filesystem::path(options.checkpoint).filename().string();
    std::string label = "live " + name;
    if (options.train_step > 0) label += " (into training step " + std::to_string(options.train_step) + ")";
    runs_.push_back(make_live_run(options.preset, options.sets, label, options.checkpoint, options.train_step));
  } else {
    const model::Preset preset = model::load_preset(options.preset, options.sets);
    if (options.train_step > 0) {
      runs_.push_back(make_live_run(options.preset, options.sets,
                                    "live " + preset.name + " (into training step " + std::to_string(options.train_step) + ")",
                                    "", options.train_step));
      return;
    }
    runs_.push_back(make_live_run(options.preset, options.sets, "live " + preset.name));
    for (const auto& c : preset.compare) {
      std::vector<std::string> sets = options.sets;
      sets.insert(sets.end(), c.sets.begin(), c.sets.end());
      runs_.push_back(make_live_run(options.preset, sets, c.label));
    }
    view_.show_compare = !preset.compare.empty();
  }
  if (!options.compare_session.empty()) {
    runs_.push_back(make_replay_run(options.compare_session));
    view_.show_compare = true;
  }
}

GuiApp::~GuiApp() {
  for (auto& run : runs_) run->source->stop();
}

void GuiApp::replace_runs(std::vector<std::unique_ptr<Run>> runs) {
  for (auto& run : runs_) run->source->stop();
  runs_ = std::move(runs);
  reset_view_for_new_main();
}

void GuiApp::reset_view_for_new_main() {
  // Not now: this frame's draw list may still use the old textures (a Load clicked mid-frame).
  clear_textures_ = true;
  view_.follow = true;
  view_.cursor = 0;
  view_.timeline = 0;
  view_.layer = view_.head = 0;
  view_.has_enlarged = false;
  view_.playing = false;
  view_.banner.clear();
  view_.banner_event = 0;
  view_.plots.clear();
}

bool GuiApp::poll() {
  if (clear_textures_) textures_->entries.clear(), clear_textures_ = false;
  bool changed = false;
  for (auto& run : runs_) changed = run->poll() || changed;
  // Events first: a breakpoint that paused the source must stop the pacing before it posts more.
  raise_banner_from_events();
  pace();
  if (pending_timeline_ >= 0 && pending_timeline_ < static_cast<int>(main().caches.size())) {
    view_.timeline = pending_timeline_;
    view_.follow = true;
    pending_timeline_ = -1;
  }
  // Forks come and go with rewinds and restarts: keep the shown timeline valid.
  if (view_.timeline >= static_cast<int>(main().caches.size())) view_.timeline = 0;
  return changed;
}

void GuiApp::pace() {
  // A limited speed is paced here with Step commands (the engine itself has no clock); as fast as
  // possible is the engine's own Run.
  // The wall clock, not ImGui's: an idle window skips frames, and ImGui's time stands still then.
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (!view_.playing || view_.speed <= 0.0f) {
    last_pace_time_ = now;
    return;
  }
  if (last_pace_time_ < 0) last_pace_time_ = now;
  view_.play_clock += (now - last_pace_time_) * view_.speed;
  last_pace_time_ = now;
  const int64_t due = static_cast<int64_t>(view_.play_clock);
  if (due <= 0) return;
  // Never queue more than one batch: a model slower than the pace drops it, it does not pile up
  // steps to post in a burst later.
  for (auto& run : runs_)
    if (run->busy()) {
      view_.play_clock = std::min(view_.play_clock, 1.0);
      return;
    }
  view_.play_clock -= static_cast<double>(due);
  post_all(model::Command::steps(std::min<int64_t>(due, 1000)));
}

void GuiApp::raise_banner_from_events() {
  const auto& events = main().events;
  // A rewind erases events: what is left was seen already.
  view_.banner_event = std::min(view_.banner_event, events.size());
  bool raised = false;  // the first error of a batch says why; the later ones are in the Events list
  for (size_t i = view_.banner_event; i < events.size(); ++i) {
    const model::Event& e = events[i];
    if (e.kind == model::EventKind::Error && !raised) {
      view_.banner = "step " + std::to_string(e.step) + ": " + e.message;
      view_.banner_is_breakpoint = false;
      raised = true;
    }
    // A breakpoint that stops the run says so where the eye is, unless an error already did.
    if (e.kind == model::EventKind::Breakpoint && !raised) {
      view_.banner = "breakpoint hit at step " + std::to_string(e.step) + ": " + e.message;
      view_.banner_is_breakpoint = true;
      raised = true;
    }
    // What pauses the source must also stop a run the GUI paces with Step commands.
    if (e.kind == model::EventKind::Error || e.kind == model::EventKind::Breakpoint ||
        e.kind == model::EventKind::NonFinite || e.message.rfind("end of the recording", 0) == 0)
      view_.playing = false;
  }
  view_.banner_event = events.size();
}

bool GuiApp::animating() const {
  if (view_.playing) return true;
  for (const auto& run : runs_)
    if (run->busy()) return true;
  return false;
}

bool GuiApp::draw() {
  rects_.clear();
  const bool quit = handle_keys(*this);
  draw_main_layout(*this);
  return !quit;
}

void GuiApp::post(const model::Command& command) {
  // A restart knob starts a new local run beside this one; an attached run restarts itself, or says why not.
  if (command.kind == model::Command::Kind::SetKnob && main().live && !main().remote()) {
    const model::Knob* knob = model::find_knob(command.knob);
    if (knob && knob->apply == model::KnobApply::Restart) {
      restart_beside(command);
      return;
    }
  }
  main().source->post(command);
}

void GuiApp::restart_beside(const model::Command& c) {
  const model::Preset& current = main().status.preset;
  const model::Knob* knob = model::find_knob(c.knob);
  if (model::knob_value(current, *knob) == c.value) return;  // chosen again: nothing changes
  // Every knob as the run has it now (live changes included), then the new value: the new run is
  // the old one's settings with this one change, from a fresh model.
  std::vector<std::string> sets;
  for (const model::Knob& k : model::knobs()) sets.push_back(k.name + "=" + model::knob_value(current, k));
  sets.push_back(c.knob + "=" + c.value);
  std::unique_ptr<Run> fresh;
  try {
    fresh = make_live_run(options_.preset, sets, "live " + current.name + " (" + c.knob + "=" + c.value + ")");
  } catch (const std::exception& e) {
    show_error(model::one_line(e.what()));  // a bad value: the old run goes on as it was
    return;
  }
  Run& old = main();
  old.source->post(model::Command::pause());
  const int64_t kept_at = old.steps(0);
  old.label += " (before " + c.knob + "=" + c.value + ")";
  runs_.insert(runs_.begin(), std::move(fresh));
  reset_view_for_new_main();
  view_.show_compare = true;
  view_.notice = c.knob + " rebuilds the model: a new run started from a fresh model with " + c.knob + "=" + c.value +
                 "; the previous run (step " + std::to_string(kept_at) + ") is kept beside it in the compare view";
}

void GuiApp::make_main(size_t r) {
  if (r == 0 || r >= runs_.size()) return;
  std::swap(runs_[0], runs_[r]);
  reset_view_for_new_main();
  view_.notice = "main run: " + main().label;
}

void GuiApp::post_all(const model::Command& command) {
  for (auto& run : runs_) run->source->post(command);
}

void GuiApp::toggle_run() {
  const bool running = view_.playing || main().status.running;
  if (running) {
    view_.playing = false;
    post_all(model::Command::pause());
    return;
  }
  follow_latest();
  if (view_.speed > 0.0f) {
    view_.playing = true;
    view_.play_clock = 1.0;  // the first step right away
    last_pace_time_ = -1;
  } else {
    post_all(model::Command::run());
  }
}

void GuiApp::step(int64_t n) {
  view_.playing = false;
  follow_latest();
  post_all(model::Command::steps(n));
}

void GuiApp::follow_latest() {
  view_.follow = true;
}

void GuiApp::seek(int64_t step) {
  view_.follow = false;
  view_.cursor = step;
  // A replay can show any recorded step: when the ring no longer holds it, seek the source to the
  // step before and play the step itself back into the ring.
  if (!main().live && !main().frame(view_.timeline, step)) {
    model::Command c = model::Command::rewind(std::max<int64_t>(0, step - 1));
    c.timeline = view_.timeline;
    post(c);
    post(model::Command::steps(1));
  }
}

void GuiApp::rewind_to_cursor() {
  if (view_.follow) return;
  if (const std::string why = main().refused("rewind"); !why.empty()) {
    show_error("rewind: " + why);
    return;
  }
  model::Command c = model::Command::rewind(view_.cursor);
  c.timeline = view_.timeline;
  post(c);
  view_.follow = true;
}

void GuiApp::fork_at_cursor(const std::vector<std::string>& sets) {
  if (const std::string why = main().refused("fork"); !why.empty()) {
    show_error("fork: " + why);
    return;
  }
  model::Command c = model::Command::fork(view_.follow ? main().steps(view_.timeline) : view_.cursor, sets);
  c.timeline = view_.timeline;
  post(c);
  view_.show_compare = true;
}

std::string GuiApp::step_into(int64_t frame_step, int64_t train_step) {
  if (!main().live)
    return "a recording cannot re-run training: memscope-cli step --session DIR --train-step " + std::to_string(train_step);
  if (train_step < 1 || frame_step < 1) return "not a training step";
  if (main().remote())
    return "stepping into a training step forks the run, which an attached viewer does not do: on the run's machine, "
           "memscope-cli step --ckpt FILE --train-step " + std::to_string(train_step);
  model::Command c = model::Command::fork(frame_step - 1, {"engine.mode=inspect", "engine.inspect_batch=" + std::to_string(train_step)});
  c.timeline = view_.timeline;
  post(c);
  pending_timeline_ = static_cast<int>(main().caches.size());
  view_.show_compare = false;  // the fork's own plots: its tokens and backward norms
  return "";
}

void GuiApp::load_preset(const std::string& preset) {
  try {
    GuiOptions o = options_;
    o.preset = preset;
    o.session.clear();
    o.compare_session.clear();
    const model::Preset p = model::load_preset(preset, o.sets);
    std::vector<std::unique_ptr<Run>> runs;
    runs.push_back(make_live_run(preset, o.sets, "live " + p.name));
    for (const auto& c : p.compare) {
      std::vector<std::string> sets = o.sets;
      sets.insert(sets.end(), c.sets.begin(), c.sets.end());
      runs.push_back(make_live_run(preset, sets, c.label));
    }
    replace_runs(std::move(runs));
    options_ = o;
    view_.show_compare = !p.compare.empty();
    view_.notice = "loaded preset " + p.name;
  } catch (const std::exception& e) {
    show_error(model::one_line(e.what()));
  }
}

void GuiApp::open_session(const std::string& path) {
  try {
    std::vector<std::unique_ptr<Run>> runs;
    std::string damage;
    runs.push_back(make_replay_run(path, &damage));
    replace_runs(std::move(runs));
    view_.show_compare = false;
    view_.notice = "opened " + path;
    if (!damage.empty()) show_error(damage);
  } catch (const std::exception& e) {
    show_error(model::one_line(e.what()));
  }
}

void GuiApp::open_checkpoint(const std::string& path) {
  try {
    std::vector<std::unique_ptr<Run>> runs;
    runs.push_back(make_live_run(options_.preset, {}, "live " + std::filesystem::path(path).filename().string(), path));
    replace_runs(std::move(runs));
    options_.checkpoint = path;
    view_.show_compare = false;
    view_.notice = "opened " + path;
  } catch (const std::exception& e) {
    show_error(model::one_line(e.what()));
  }
}

void GuiApp::open_compare_session(const std::string& path) {
  try {
    std::string damage;
    runs_.push_back(make_replay_run(path, &damage));
    view_.show_compare = true;
    if (!damage.empty()) show_error(damage);
  } catch (const std::exception& e) {
    show_error(model::one_line(e.what()));
  }
}

void GuiApp::toggle_recording() {
  if (!main().status.recording.empty()) {
    post(model::Command{model::Command::Kind::StopRecording});
    view_.notice = "recording stopped: " + main().status.recording;
    return;
  }
  start_recording(default_session_path());
}

bool GuiApp::start_recording(const std::string& path) {
  if (!recording_path_ok("Record", path)) return false;
  post(model::Command::start_recording(path));
  view_.notice = "recording into " + path;
  return true;
}

bool GuiApp::recording_path_ok(const std::string& what, const std::string& path) {
  // Checked here, before the engine gets the command: the banner then says what is wrong with the
  // directory, not what failed after it.
  try {
    model::check_output({what, model::session_dir_for(path), model::FileKind::Session, 16u << 20}, {}, false);
    return true;
  } catch (const std::exception& e) {
    show_error(model::one_line(e.what()));
    return false;
  }
}

// runs/ under the working directory, so that recordings do not litter the directory the app was
// started from (issue 19).
std::string default_session_path() {
  std::error_code ec;
  std::filesystem::create_directories("runs", ec);  // a failure shows as the directory check's banner
  return "runs/memscope-" + timestamp() + ".memscope";
}

void GuiApp::save_session() { save_session(default_session_path()); }

void GuiApp::save_session(const std::string& path) {
  if (!main().status.recording.empty()) {
    view_.notice = "already recording into " + main().status.recording + " (every frame is saved)";
    return;
  }
  // Starting a recording seeds it with every frame and event the run still holds; stopping right
  // after writes it out: the session as it is now.
  if (!recording_path_ok("File > Save", path)) return;
  post(model::Command::start_recording(path));
  post(model::Command{model::Command::Kind::StopRecording});
  view_.notice = main().remote() ? "asked the run at " + main().status.remote + " to save its session to " + path +
                                       ", on its machine and relative to its working directory"
                                 : "saved the session to " + std::filesystem::absolute(path).string();
}

void GuiApp::export_session(bool csv, const std::string& out) {
  try {
    std::string session;
    if (!main().live)
      session = static_cast<model::Replay&>(*main().source).dir().string();
    else
      throw model::UserError("export reads a recorded session: save this run first (Ctrl+S), then open it");
    model::check_output({csv ? "Export CSV" : "Export", out, csv ? model::FileKind::Csv : model::FileKind::SessionExport, 0},
                        {session}, false);
    const model::SessionReader reader(session);
    model::ExportRange range;
    range.timeline = view_.timeline;
    const auto result = csv ? model::export_csv(reader, out, range) : model::export_safetensors(reader, out, range);
    view_.notice = "exported " + std::to_string(result.frames) + " frames to " + out;
  } catch (const std::exception& e) {
    show_error(model::one_line(e.what()));
  }
}

void GuiApp::show_error(const std::string& message) {
  view_.banner = message;
  view_.banner_is_breakpoint = false;
}

int64_t GuiApp::shown_step() const {
  return view_.follow ? main().steps(view_.timeline) : view_.cursor;
}

std::shared_ptr<const model::Frame> GuiApp::shown_frame() const {
  return main().frame(view_.timeline, view_.follow ? -1 : view_.cursor);
}

const TimelineCache& GuiApp::shown_cache() const {
  static const TimelineCache empty;
  const auto& caches = main().caches;
  return view_.timeline < static_cast<int>(caches.size()) ? caches[static_cast<size_t>(view_.timeline)] : empty;
}

void GuiApp::note_rect(const std::string& name) {
  rects_[name] = ImRect(ImGui::GetItemRectMin(), ImGui::GetItemRectMax());
}

}  // namespace memscope::app
