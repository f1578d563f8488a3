// Determinism, rewind and fork (DESIGN "Rewind and fork"): the same preset, seed and commands give
// bit-identical frames; a rewind re-makes the frames it dropped exactly; a fork shares the past.
#include "engine/engine_test_support.h"

using namespace memscope;
using namespace memscope::model;
using test::FrameLog;

namespace {

std::vector<Frame> run_with(const EngineOptions& options, const std::vector<Command>& commands) {
  Engine engine(options);
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  for (const auto& c : commands) {
    engine.post(c);
    engine.wait_idle();
  }
  return log->frames;
}

Command reset_momentum(int layer) {
  Command c{Command::Kind::ResetMomentum};
  c.layer = layer;
  return c;
}

}  // namespace

TEST_CASE("two identical runs give identical frames, in every mode", "[engine]") {
  for (const char* mode : {"inspect", "train+inspect"}) {
    const auto options = test::small_engine({std::string("engine.mode=") + mode, "engine.inspect_every=2"});
    const std::vector<Command> commands{Command::steps(5), reset_momentum(0), Command::steps(5)};
    const auto a = run_with(options, commands);
    const auto b = run_with(options, commands);
    REQUIRE(a.size() == 10);
    REQUIRE(b.size() == 10);
    for (size_t i = 0; i < a.size(); ++i) CHECK(test::same_frame(a[i], b[i]));
    CHECK_FALSE(test::same_frame(a[3], a[4]));  // the frames are not trivially equal
  }
}

TEST_CASE("rewind restores a keyframe and re-makes the same frames, commands in between are replayed",
          "[engine]") {
  for (const char* mode : {"inspect", "train"}) {
    Engine engine(test::small_engine({std::string("engine.mode=") + mode}));  // keyframes every 4 steps
    auto log = std::make_shared<FrameLog>();
    engine.add_sink(log);
    engine.start();
    engine.post(Command::steps(6));
    engine.post(Command::set_knob("memory.lr.max", "0.5"));  // at step 6, inside keyframe interval 4..8
    engine.post(reset_momentum(1));
    engine.post(Command::steps(6));
    engine.wait_idle();
    const std::vector<Frame> original = log->frames;
    REQUIRE(original.size() == 12);

    engine.post(Command::rewind(7));  // keyframe 4, then steps 5, 6, the two commands, 7
    engine.wait_idle();
    CHECK(engine.status().steps.front() == 7);
    CHECK(engine.status().preset.memory.max_lr == 0.5);
    const auto ring = engine.ring()->frames();
    REQUIRE(ring.back()->step == 7);
    for (const auto& f : ring) CHECK(test::same_frame(*f, original[static_cast<size_t>(f->step - 1)]));

    engine.post(Command::steps(5));
    engine.wait_idle();
    const auto after = engine.ring()->frames();
    REQUIRE(after.back()->step == 12);
    for (const auto& f : after) CHECK(test::same_frame(*f, original[static_cast<size_t>(f->step - 1)]));

    // Rewinding before the knob change undoes it: the future after the rewind point is dropped.
    engine.post(Command::rewind(3));
    engine.wait_idle();
    CHECK(engine.status().preset.memory.max_lr == 1.0);
    CHECK(engine.ring()->latest()->step == 3);
  }
}

TEST_CASE("a rewind to before an engine.probe_seed change steps the old stream's tokens again", "[engine]") {
  // The seed change restarts the inspect stream at its sequence 0, the one the rewind goes back
  // into: the sequence loaded then has the number the keyframe's cursor names, but another seed's
  // tokens. It must be loaded again, not reused.
  Engine engine(test::small_engine());  // keyframes every 4 steps
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(3));  // within sequence 0
  engine.post(Command::set_knob("engine.probe_seed", "12345"));
  engine.post(Command::steps(3));  // the new seed's sequence 0
  engine.wait_idle();
  const std::vector<Frame> original = log->frames;
  REQUIRE(original.size() == 6);
  REQUIRE(original[0].sequence == 0);
  REQUIRE(original[3].sequence == 0);
  bool other_tokens = false;  // the two streams' sequence 0 differ somewhere in their first tokens
  for (size_t i = 0; i < 3; ++i) other_tokens = other_tokens || original[i].token != original[3 + i].token;
  REQUIRE(other_tokens);

  engine.post(Command::rewind(2));  // keyframe 0, then steps 1 and 2, seed as it was
  engine.post(Command::steps(1));
  engine.wait_idle();
  const auto ring = engine.ring()->frames();
  REQUIRE(ring.back()->step == 3);
  for (const auto& f : ring) {
    INFO("step " << f->step);
    CHECK(f->token == original[static_cast<size_t>(f->step - 1)].token);
    CHECK(test::same_frame(*f, original[static_cast<size_t>(f->step - 1)]));
  }
}

TEST_CASE("a fork equals its parent up to the fork step and differs after it", "[engine]") {
  Engine engine(test::small_engine());
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(10));
  engine.post(Command::fork(6, {"memory.lr.max=0.2"}));
  engine.wait_idle();
  REQUIRE(engine.timelines() == 2);
  CHECK(engine.status().steps == std::vector<int64_t>{10, 6});

  engine.post(Command::steps(4));  // both timelines advance together
  engine.wait_idle();
  CHECK(engine.status().steps == std::vector<int64_t>{14, 10});
  const auto main = log->of_timeline(0);
  const auto fork = log->of_timeline(1);
  REQUIRE(main.size() == 14);
  // The fork re-ran from keyframe 4: steps 5, 6 equal the parent's, 7…10 differ.
  REQUIRE(fork.size() == 6);
  for (const auto& f : fork) {
    const Frame& parent = main[static_cast<size_t>(f.step - 1)];
    if (f.step <= 6) CHECK(test::same_frame(f, parent));
    else CHECK_FALSE(test::same_frame(f, parent));
  }
  CHECK(engine.ring(1)->latest()->step == 10);

  // Forks change live knobs only: a restart knob would not share the parent's past.
  engine.post(Command::fork(4, {"model.layers=1"}));
  engine.wait_idle();
  CHECK(engine.timelines() == 2);
  CHECK(engine.events().back().kind == EventKind::Error);
  CHECK(engine.events().back().message.find("model.layers") != std::string::npos);
}

TEST_CASE("keyframes stay within their budget and a rewind still reaches the start", "[engine]") {
  // A keyframe of this model is a few tens of kB: 0.1 MB holds only a handful.
  Engine engine(test::small_engine({"engine.keyframe_every=1", "engine.keyframe_budget_mb=0.1"}));
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(40));
  engine.wait_idle();
  engine.post(Command::rewind(2));
  engine.wait_idle();
  CHECK(engine.status().steps.front() == 2);
  engine.post(Command::steps(38));
  engine.wait_idle();
  const auto frames = engine.ring()->frames();
  for (const auto& f : frames) CHECK(test::same_frame(*f, log->frames[static_cast<size_t>(f->step - 1)]));
}
