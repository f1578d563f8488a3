// GuiApp: the controller that joins the sources (model/) to the widgets (viz/). It owns the runs
// and the view state, polls the runs once per frame, draws every panel, and turns the user's
// actions into commands (DESIGN principle 2: the GUI owns only view state). The main loop
// (main.cpp) and the GUI tests drive it alike.
#pragma once
#include <imgui.h>
#include <imgui_internal.h>  // ImRect

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/gui/run.h"
#include "app/gui/view_state.h"
#include "model/engine/command.h"

namespace memscope::app {

struct GuiOptions {
  std::string preset = "demo-mqar";  // a preset name or .toml path, for a live run
  std::vector<std::string> sets;     // KEY=VALUE overrides
  std::string session;               // when set, replay this recording instead
  bool follow = false;               // with session: it is still being recorded; play it as it grows
  std::string compare_session;       // a recording shown beside the main run in the compare view
  std::string attach, token;         // when attach is set: a run served by another process (HOST:PORT)
  std::string record;                // when set, the live run is recorded into this session from the start
  std::string checkpoint;            // when set, the live run continues this checkpoint (its preset; sets on top)
  int64_t train_step = 0;            // > 0: step into this training step (from the checkpoint or the preset's start)
  std::string device_line;
};

// Where Ctrl+S and Record put a session: runs/memscope-DATE-TIME.memscope under the working
// directory (runs/ is made when missing).
std::string default_session_path();

class GuiApp {
 public:
  // Builds the runs: a bad preset or session throws UserError (the caller prints one line).
  explicit GuiApp(const GuiOptions& options);
  ~GuiApp();

  // Copies what the runs did since the last call and paces a limited-speed run. True when
  // anything changed (the window then redraws; otherwise an idle window stays asleep).
  bool poll();
  // Draws the whole window into the current ImGui frame, keys included. Returns false to quit.
  bool draw();
  // True while a run steps: the main loop keeps drawing instead of sleeping.
  bool animating() const;

  ViewState& view() { return view_; }
  const ViewState& view() const { return view_; }
  Run& main() { return *runs_.front(); }
  const Run& main() const { return *runs_.front(); }
  std::vector<std::unique_ptr<Run>>& runs() { return runs_; }

  // ---- Actions (panels, keys and tests call these) ----
  void toggle_run();              // Space: run/pause every run in lockstep
  void step(int64_t n);           // → / Shift+→ / the transport buttons
  void post(const model::Command& command);       // to the main run only
  void post_all(const model::Command& command);   // to every run (transport, resets)
  void seek(int64_t step);        // pin the view at a step (a replay seeks there when needed)
  void follow_latest();
  void rewind_to_cursor();        // live: rewind the engine to the pinned step
  void fork_at_cursor(const std::vector<std::string>& sets);
  // Step into training step `train_step`, whose frame is engine step `frame_step` of the shown
  // timeline (issue 18): a fork from the weights before it that steps its batch token by token in
  // inspect mode, with the trainer's chunk form and the backward norms; the view moves to the fork.
  // Returns why it cannot (a recording, not a training step), or "" when posted.
  std::string step_into(int64_t frame_step, int64_t train_step);
  void load_preset(const std::string& preset);
  // Run r (a compare run) becomes the main run, and the main run a compare run: the way back to a
  // run that a restart knob change set aside.
  void make_main(size_t r);  // replaces the runs; an error goes to the banner
  void open_session(const std::string& path);
  void open_checkpoint(const std::string& path);  // replaces the runs with the live run saved there
  void open_compare_session(const std::string& path);
  void toggle_recording();        // Record: start or stop recording into a new session
  void save_session();            // Ctrl+S: write what the run holds now into a new session under runs/
  void save_session(const std::string& path);  // File > Save session as: the same, into `path`
  // Starts recording the main run into `path`; false (with the reason on the banner) when it cannot.
  bool start_recording(const std::string& path);
  void export_session(bool csv, const std::string& out);
  void show_error(const std::string& message);  // one line in the banner, never a crash

  // The step the panels show for the main run's shown timeline.
  int64_t shown_step() const;
  std::shared_ptr<const model::Frame> shown_frame() const;
  const TimelineCache& shown_cache() const;

  // Screen rectangles of named widgets from the last frame ("events/row/3", "panel/memory"):
  // where the GUI tests click and which regions they compare.
  std::map<std::string, ImRect>& rects() { return rects_; }
  void note_rect(const std::string& name);  // the last item's rectangle

  // GL objects of the memory panel, kept between frames (one texture per matrix).
  struct Textures;
  Textures& textures() { return *textures_; }

 private:
  // False (with the reason on the banner) when a session cannot be written at `path`.
  bool recording_path_ok(const std::string& what, const std::string& path);
  void replace_runs(std::vector<std::unique_ptr<Run>> runs);
  // A restart knob changed on the live main run (issue 19): a new run with every current knob and
  // this one becomes the main run; the old one is paused and kept beside it in the compare view.
  void restart_beside(const model::Command& set_knob);
  void reset_view_for_new_main();
  void raise_banner_from_events();
  void pace();

  GuiOptions options_;
  ViewState view_;
  std::vector<std::unique_ptr<Run>> runs_;
  std::map<std::string, ImRect> rects_;
  std::unique_ptr<Textures> textures_;
  double last_pace_time_ = -1;
  bool clear_textures_ = false;
  int pending_timeline_ = -1;  // a fork just asked for, shown once the engine has made it
};

// A run of a preset (plus overrides), or of a checkpoint, as a started live engine; train_step > 0
// steps into that training step (model::EngineOptions).
std::unique_ptr<Run> make_live_run(const std::string& preset, const std::vector<std::string>& sets,
                                   const std::string& label, const std::string& checkpoint = "", int64_t train_step = 0);
// A recorded session as a started replay.
// `damage`, when given, gets what the recording lost ("" when whole), for a banner.
// `follow`: a recording still in progress, played as its chunks land (model::Replay).
std::unique_ptr<Run> make_replay_run(const std::string& path, std::string* damage = nullptr, bool follow = false);
// A run in another process (`memscope-cli train --serve`), attached over the wire (model::RemoteSource).
std::unique_ptr<Run> make_remote_run(const std::string& address, const std::string& token);

}  // namespace memscope::app
