// Serve and attach (issue 22): an engine served on loopback and a RemoteSource attached to it, in
// one process, over real sockets.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "engine_test_support.h"
#include "model/remote/remote_server.h"
#include "model/remote/remote_source.h"
#include "model/remote/socket.h"
#include "model/util/errors.h"

using namespace memscope;
using memscope::test::small_engine;

namespace {

struct Served {
  std::unique_ptr<model::Engine> engine;
  std::shared_ptr<model::RemoteServer> server;
  std::shared_ptr<test::FrameLog> log = std::make_shared<test::FrameLog>();

  explicit Served(std::vector<std::string> sets = {}, int port = 0, size_t queue_frames = 2048) {
    engine = std::make_unique<model::Engine>(small_engine(std::move(sets)));
    model::ServeOptions o;
    o.endpoint = {"127.0.0.1", port};
    o.token = "secret";
    o.server = "test";
    o.label = "test run";
    o.refused = {{"rewind", "not from a viewer"}, {"fork", "not from a viewer"}};
    o.viewer_queue_frames = queue_frames;
    server = std::make_shared<model::RemoteServer>(*engine, o);
    engine->add_sink(server);
    engine->add_sink(log);
    engine->start();
    server->start();
  }
  ~Served() { stop(); }
  void stop(const std::string& why = "") {
    if (!engine) return;
    server->stop(why);
    engine->stop();
    engine.reset();
  }
  model::AttachOptions attach(const std::string& token = "secret") const {
    model::AttachOptions a;
    a.endpoint = server->endpoint();
    a.token = token;
    a.client = "test viewer";
    a.retry_s = 0.2;
    return a;
  }
};

// Polls `done` for up to `seconds`.
bool eventually(const std::function<bool()>& done, double seconds = 30) {
  const double until = model::steady_seconds() + seconds;
  while (model::steady_seconds() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

bool has_event(const std::vector<model::Event>& events, const std::string& text, int64_t step = -1) {
  for (const auto& e : events)
    if (e.message == text && (step < 0 || e.step == step)) return true;
  return false;
}

// A raw TCP connection that says hello and then never reads: a stalled viewer.
model::Socket stalled_viewer(const model::Endpoint& at) {
  model::Socket s = model::connect_to(at, 5);
  const std::string hello = model::encode_message(model::MessageType::Hello, model::encode_hello({"secret", "stalled"}));
  REQUIRE(::send(s.fd(), hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
  return s;
}

}  // namespace

TEST_CASE("remote: commands round-trip and the viewer's frames equal the engine's", "[engine]") {
  Served run;
  model::RemoteSource viewer(run.attach());
  viewer.start();
  CHECK(viewer.welcome().label == "test run");
  viewer.post(model::Command::steps(6));
  REQUIRE(viewer.wait_idle_for(60));
  const auto status = viewer.status();
  CHECK(status.steps.front() == 6);
  CHECK(status.connected);
  CHECK(status.preset.name == "demo-mqar");
  CHECK(status.preset.model.d_model == 16);  // the run's knobs, from its TOML
  CHECK(status.refused.count("rewind") == 1);
  // Every frame the engine made, bit for bit (matrices included), in the viewer's ring.
  const auto sent = run.log->of_timeline(0);
  REQUIRE(sent.size() == 6);
  REQUIRE(eventually([&] { return viewer.ring(0)->frames().size() == 6; }));  // frames trail idle
  const auto got = viewer.ring(0)->frames();
  REQUIRE(got.size() == 6);
  for (size_t i = 0; i < sent.size(); ++i) CHECK(test::same_frame(sent[i], *got[i]));
  CHECK(has_event(viewer.events(), "step 6"));

  // Breakpoints and pause round-trip too.
  model::Command b{model::Command::Kind::AddBreakpoint};
  b.breakpoint = model::parse_breakpoint("step==9");
  viewer.post(b);
  viewer.post(model::Command::run());
  REQUIRE(eventually([&] { return viewer.status().steps.front() == 9 && !viewer.status().running; }));
  REQUIRE(viewer.wait_idle_for(30));
  CHECK(run.engine->status().steps.front() == 9);
  CHECK(viewer.status().breakpoints.size() == 1);
  CHECK(eventually([&] { return has_event(viewer.events(), "break on step==9"); }));
  viewer.stop();
}

TEST_CASE("remote: a knob set from the viewer is in the run's events and changes the next step", "[engine]") {
  const std::vector<std::string> train = {"engine.mode=train"};
  // The same steps and the same knob change, once posted locally and once from a viewer.
  model::Engine local(small_engine(train));
  auto local_log = std::make_shared<test::FrameLog>();
  local.add_sink(local_log);
  local.start();
  local.post(model::Command::steps(3));
  local.post(model::Command::set_knob("train.lr", "0.05"));
  local.post(model::Command::steps(2));
  local.wait_idle();

  Served run(train);
  model::RemoteSource viewer(run.attach());
  viewer.start();
  viewer.post(model::Command::steps(3));
  viewer.post(model::Command::set_knob("train.lr", "0.05"));
  viewer.post(model::Command::steps(2));
  REQUIRE(viewer.wait_idle_for(120));
  CHECK(has_event(run.engine->events(), "set train.lr = 0.05", 3));
  CHECK(eventually([&] { return has_event(viewer.events(), "set train.lr = 0.05", 3); }));
  CHECK(viewer.status().preset.train.lr == Approx(0.05));
  const auto remote = run.log->of_timeline(0), here = local_log->of_timeline(0);
  REQUIRE(remote.size() == 5);
  REQUIRE(here.size() == 5);
  for (size_t i = 0; i < 5; ++i) CHECK(test::same_frame(remote[i], here[i]));

  // And without the change, step 4 differs: the knob did change the next step.
  model::Engine plain(small_engine(train));
  auto plain_log = std::make_shared<test::FrameLog>();
  plain.add_sink(plain_log);
  plain.start();
  plain.post(model::Command::steps(5));
  plain.wait_idle();
  CHECK(test::same_frame(plain_log->frames[2], remote[2]));
  CHECK_FALSE(test::same_frame(plain_log->frames[3], remote[3]));
  viewer.stop();
}

TEST_CASE("remote: a wrong token is refused, in one line", "[engine]") {
  Served run;
  try {
    model::RemoteSource viewer(run.attach("guess"));
    FAIL("a wrong token attached");
  } catch (const model::UserError& e) {
    const std::string what = e.what();
    CHECK(what.find("refused this viewer: wrong token") != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
  }
  CHECK(run.server->viewers() == 0);
  // Nobody listening is one line too.
  const model::Endpoint gone = run.server->endpoint();
  run.stop();
  model::AttachOptions a;
  a.endpoint = gone;
  a.token = "secret";
  CHECK_THROWS_WITH(model::RemoteSource(a), Catch::Contains("cannot connect to 127.0.0.1:"));
}

TEST_CASE("remote: rewind and fork are refused from a viewer with the reason, nothing sent", "[engine]") {
  Served run;
  model::RemoteSource viewer(run.attach());
  viewer.start();
  viewer.post(model::Command::steps(2));
  REQUIRE(viewer.wait_idle_for(60));
  viewer.post(model::Command::rewind(1));
  viewer.post(model::Command::fork(1, {}));
  CHECK(eventually([&] { return has_event(viewer.events(), "rewind to step 1: not from a viewer"); }));
  // Two notices, each its own message: the second may still be on its way.
  CHECK(eventually([&] { return has_event(viewer.events(), "fork at step 1: not from a viewer"); }));
  REQUIRE(viewer.wait_idle_for(30));
  CHECK(run.engine->timelines() == 1);
  CHECK(run.engine->status().steps.front() == 2);
  viewer.stop();
}

TEST_CASE("remote: a malformed message or another wire version closes that connection only", "[engine]") {
  Served run;
  model::RemoteSource viewer(run.attach());
  viewer.start();
  const auto send_raw = [&](const std::string& bytes) {
    model::Socket s = model::connect_to(run.server->endpoint(), 5);
    REQUIRE(::send(s.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
    // The run closes it: a read sees the end of the stream (after any refusal it wrote).
    char buffer[4096];
    pollfd p{s.fd(), POLLIN, 0};
    bool closed = false;
    for (int i = 0; i < 100 && !closed; ++i) {
      if (poll(&p, 1, 100) == 1) closed = ::recv(s.fd(), buffer, sizeof buffer, 0) <= 0;
    }
    return closed;
  };
  std::string other_version = model::encode_message(model::MessageType::Hello, model::encode_hello({"secret", "x"}));
  other_version[4] = 7;  // version 7
  CHECK(send_raw(other_version));
  CHECK(send_raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string huge = model::encode_message(model::MessageType::Command, "{}");
  huge[8] = huge[9] = huge[10] = huge[11] = '\xff';  // 4 GiB announced
  CHECK(send_raw(huge));
  // A valid hello, then a command that is not one.
  CHECK(send_raw(model::encode_message(model::MessageType::Hello, model::encode_hello({"secret", "x"})) +
                 model::encode_message(model::MessageType::Command, "{\"kind\": \"format disk\"}")));
  // The attached viewer and the run never noticed.
  viewer.post(model::Command::steps(2));
  REQUIRE(viewer.wait_idle_for(60));
  CHECK(viewer.status().steps.front() == 2);
  CHECK(viewer.status().connected);
  viewer.stop();
}

TEST_CASE("remote: a stalled viewer loses frames, the run and a recording lose none", "[engine]") {
  const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/memscope-remote-stall-" +
                          std::to_string(::getpid()) + ".memscope";
  std::filesystem::remove_all(dir);
  // Small queue and full matrices every step: the stalled viewer's socket fills quickly.
  Served run({"probe.matrices_every=1", "probe.full_matrices=true"}, 0, 8);
  model::Socket stalled = stalled_viewer(run.server->endpoint());
  REQUIRE(eventually([&] { return run.server->viewers() == 1; }));
  run.engine->post(model::Command::start_recording(dir));
  run.engine->post(model::Command::steps(300));
  REQUIRE(run.engine->wait_idle_for(300));
  CHECK(run.engine->status().steps.front() == 300);
  CHECK(run.engine->status().last_error.empty());
  run.engine->post(model::Command{model::Command::Kind::StopRecording});
  run.engine->wait_idle();
  CHECK(run.log->of_timeline(0).size() == 300);
  // A viewer attached now gets the run's status with its own count: nothing missed.
  model::RemoteSource late(run.attach());
  late.start();
  REQUIRE(eventually([&] { return late.status().steps.front() == 300; }));
  CHECK(late.status().frames_missed == 0);
  late.stop();
  std::filesystem::remove_all(dir);
}

TEST_CASE("remote: the viewer says why it is detached and attaches again to a restarted run", "[engine]") {
  auto first = std::make_unique<Served>();
  const int port = first->server->endpoint().port;
  model::RemoteSource viewer(first->attach());
  viewer.start();
  viewer.post(model::Command::steps(4));
  REQUIRE(viewer.wait_idle_for(60));
  REQUIRE(eventually([&] { return viewer.ring(0)->frames().size() == 4; }));  // frames trail idle (below)
  first->stop("the run finished at step 4");
  first.reset();
  REQUIRE(eventually([&] { return !viewer.status().connected; }));
  CHECK_THAT(viewer.status().last_error, Catch::Contains("ended: the run finished at step 4"));
  CHECK(viewer.ring(0)->frames().size() == 4);  // the view stays
  // The trainer restarts on the same port: the viewer finds it and starts its view over.
  Served second({}, port);
  REQUIRE(eventually([&] { return viewer.status().connected; }));
  viewer.post(model::Command::steps(2));
  REQUIRE(viewer.wait_idle_for(60));
  // Idle is the run's word; its last frames may still be on the wire (seen under load: a null
  // latest() right after the restart), so wait for them before reading them.
  REQUIRE(eventually([&] { return viewer.ring(0)->frames().size() == 2; }));
  REQUIRE_FALSE(viewer.status().steps.empty());
  CHECK(viewer.status().steps.front() == 2);
  REQUIRE(viewer.ring(0)->latest() != nullptr);
  CHECK(viewer.ring(0)->latest()->step == 2);
  viewer.stop();
}
