// memscope-cli attach: a viewer without a window (issue 22). It attaches to a run served with
// --serve, sends the commands given, and prints what arrives as JSON lines: the run's events, and
// every probed or training frame. Scripts drive a headless run with it; the tests use it as the
// viewer they kill.
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <sstream>
#include <thread>

#include "app/cli/commands.h"
#include "app/cli/interrupt.h"
#include "model/probe/frame_json.h"
#include "model/remote/remote_source.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct AttachCliOptions {
  std::string address, token;
  std::vector<std::string> posts;
  int64_t until_step = 0;
  double seconds = 0;
  bool quiet = false;
};

// "run", "pause", "step N", "set KNOB=VALUE", "reset momentum", "reset memory", "checkpoint PATH",
// "record PATH", "stop recording", "break WHAT" (as --break-on).
model::Command parse_post(const std::string& text) {
  using model::Command;
  std::istringstream in(text);
  std::string verb, rest;
  in >> verb;
  std::getline(in >> std::ws, rest);
  auto need = [&](const char* what) {
    if (rest.empty()) throw model::UserError("--post \"" + text + "\": " + what + " is missing");
  };
  if (verb == "run") return Command::run();
  if (verb == "pause") return Command::pause();
  if (verb == "step") {
    need("the step count");
    const long long n = std::atoll(rest.c_str());
    if (n < 1) throw model::UserError("--post \"" + text + "\": the step count must be at least 1");
    return Command::steps(n);
  }
  if (verb == "set") {
    const auto eq = rest.find('=');
    if (eq == std::string::npos) throw model::UserError("--post \"" + text + "\": expected set KNOB=VALUE");
    return Command::set_knob(rest.substr(0, eq), rest.substr(eq + 1));
  }
  if (verb == "reset" && (rest == "momentum" || rest == "memory"))
    return Command{rest == "momentum" ? Command::Kind::ResetMomentum : Command::Kind::ResetMemory};
  if (verb == "checkpoint") {
    need("the path");
    Command c{Command::Kind::SaveCheckpoint};
    c.path = rest;
    return c;
  }
  if (verb == "record") {
    need("the session path");
    return Command::start_recording(rest);
  }
  if (verb == "stop" && rest == "recording") return Command{Command::Kind::StopRecording};
  if (verb == "break") {
    need("what to break on");
    Command c{Command::Kind::AddBreakpoint};
    c.breakpoint = model::parse_breakpoint(rest);
    return c;
  }
  throw model::UserError("--post \"" + text + "\": unknown command (run, pause, step N, set KNOB=VALUE, reset momentum, "
                         "reset memory, checkpoint PATH, record PATH, stop recording, break WHAT)");
}

void run_attach(const AttachCliOptions& o) {
  using namespace memscope::model;
  std::vector<Command> commands;
  for (const auto& p : o.posts) commands.push_back(parse_post(p));
  AttachOptions a;
  a.endpoint = parse_attach_address(o.address);
  a.token = o.token;
  a.client = "memscope-cli attach (pid " + std::to_string(::getpid()) + ")";
  RemoteSource run(a);
  const Welcome w = run.welcome();
  std::cout << nlohmann::json{{"attached", a.endpoint.text()}, {"server", w.server}, {"label", w.label}, {"refused", w.refused}}.dump() << std::endl;
  run.start();
  catch_interrupts();
  for (const auto& c : commands) run.post(c);
  const double start = steady_seconds();
  size_t events_seen = 0;
  int64_t last_step = 0;
  for (;;) {
    run.wait_idle_for(0.05);
    for (const Event& e : run.events(events_seen)) std::cout << event_to_json(e).dump() << '\n';
    events_seen = run.events().size();
    if (!o.quiet)
      if (const auto ring = run.ring(0))
        for (const auto& f : ring->frames()) {
          if (f->step <= last_step) continue;
          last_step = f->step;
          if (f->layers > 0 || f->kind == FrameKind::Train) std::cout << frame_to_json(*f).dump() << '\n';
        }
    std::cout.flush();
    const EngineStatus s = run.status();
    if (!s.connected) {
      std::cout << nlohmann::json{{"detached", s.last_error}}.dump() << std::endl;
      break;
    }
    if (interrupted() || (o.until_step > 0 && s.steps.front() >= o.until_step) ||
        (o.seconds > 0 && steady_seconds() - start > o.seconds))
      break;
  }
  const EngineStatus s = run.status();
  std::cout << nlohmann::json{{"steps", s.steps.front()},
                              {"frames_received", run.frames_received()},
                              {"bytes_received", run.bytes_received()},
                              {"frames_missed", s.frames_missed},
                              {"events_missed", s.events_missed}}
                   .dump()
            << std::endl;
  run.stop();
}

}  // namespace

void register_attach(CLI::App& app) {
  auto o = std::make_shared<AttachCliOptions>();
  CLI::App* cmd = app.add_subcommand("attach", "Attach to a run served with --serve: send commands, print its events and frames as JSON lines");
  cmd->add_option("address", o->address, "HOST:PORT the run serves on")->required();
  cmd->add_option("--token", o->token, "The token the run printed (or was given)")->required();
  cmd->add_option("--post", o->posts,
                  "A command to send, repeatable, in order: run, pause, \"step N\", \"set KNOB=VALUE\", \"reset momentum\", "
                  "\"reset memory\", \"checkpoint PATH\", \"record PATH\", \"stop recording\", \"break WHAT\"");
  cmd->add_option("--until-step", o->until_step, "Detach once the run has reached this step")->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  cmd->add_option("--seconds", o->seconds, "Detach after this long")->check(CLI::Range(0.0, 1e9));
  cmd->add_flag("--quiet", o->quiet, "Print events only, no frames");
  cmd->callback([o] { run_attach(*o); });
}

}  // namespace memscope::app
