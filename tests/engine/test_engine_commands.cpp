// The engine thread: commands between steps, NaN and errors pause it without killing it,
// breakpoints, restart knobs, and every probed frame carrying SPEC §8's metrics.
#include <cmath>
#include <thread>

#include "engine/engine_test_support.h"
#include "model/probe/event.h"

using namespace memscope;
using namespace memscope::model;
using test::FrameLog;

namespace {

bool has_event(const std::vector<Event>& events, EventKind kind) {
  for (const auto& e : events)
    if (e.kind == kind) return true;
  return false;
}

Command targeted(Command::Kind kind, int layer, int head) {
  Command c{kind};
  c.layer = layer;
  c.head = head;
  return c;
}

}  // namespace

TEST_CASE("inspect frames carry every probe of SPEC §8 for each layer and head", "[engine]") {
  Engine engine(test::small_engine());
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(4));
  engine.wait_idle();
  REQUIRE(log->frames.size() == 4);
  const Frame& f = log->frames.back();
  CHECK(f.step == 4);
  CHECK(f.kind == FrameKind::Inspect);
  CHECK(f.layers == 2);
  CHECK(f.heads == 2);
  REQUIRE(f.weights == std::vector<std::string>{"M"});
  for (int l = 0; l < f.layers; ++l)
    for (int h = 0; h < f.heads; ++h) {
      for (int k = 0; k < kHeadMetricCount; ++k) CHECK(std::isfinite(f.head(l, h, static_cast<HeadMetric>(k))));
      CHECK(f.weight(l, h, 0, WeightMetric::NormM) > 0);
      CHECK(f.weight(l, h, 0, WeightMetric::NormDM) > 0);
      CHECK(f.weight(l, h, 0, WeightMetric::Erank) >= 1.0f);
      CHECK(f.weight(l, h, 0, WeightMetric::Erank) <= 16.0f);
      CHECK(std::isfinite(f.weight(l, h, 0, WeightMetric::NsError)));  // demo-mqar is atlas: muon
      CHECK(f.weight(l, h, 0, WeightMetric::NsSmin) <= f.weight(l, h, 0, WeightMetric::NsSmax));
      CHECK(f.weight(l, h, 0, WeightMetric::NonFinite) == 0);
      CHECK(f.head(l, h, HeadMetric::Retain) > 0);
      CHECK(f.head(l, h, HeadMetric::Retain) <= 1);
      CHECK(f.head(l, h, HeadMetric::Gain) ==
            Approx(f.head(l, h, HeadMetric::SurpriseBefore) - f.head(l, h, HeadMetric::SurpriseAfter)).margin(1e-6));
    }
  // probe.matrices_every = 2: step 4 has M, S and ΔM for each layer and head, step 3 none.
  CHECK(f.matrices.size() == 2 * 2 * 3);
  CHECK(log->frames[2].matrices.empty());
  CHECK(engine.ring()->latest()->step == 4);
}

TEST_CASE("a NaN injected into one head pauses the engine with an event naming it, commands still work", "[engine]") {
  Engine engine(test::small_engine());
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(2));
  engine.post(targeted(Command::Kind::InjectNan, 1, 0));
  engine.post(Command::run());
  engine.wait_idle();  // returns only because the NaN paused the run

  const std::vector<Event> events = engine.events();
  const Event* nan = nullptr;
  for (const auto& e : events)
    if (e.kind == EventKind::NonFinite && !nan) nan = &e;
  REQUIRE(nan != nullptr);
  CHECK(nan->layer == 1);
  CHECK(nan->head == 0);
  CHECK(nan->tensor == "M");
  CHECK(nan->step == 3);
  CHECK(nan->message.find("layer 1 head 0 M") != std::string::npos);
  CHECK(has_event(events, EventKind::Error));
  CHECK_FALSE(engine.status().running);
  CHECK(engine.status().steps.front() == 3);

  // Still alive: reset the broken head and step on, with finite memories again.
  engine.post(targeted(Command::Kind::ResetMemory, 1, 0));
  engine.post(Command::steps(2));
  engine.wait_idle();
  CHECK(engine.status().steps.front() == 5);
  CHECK(log->frames.back().weight(1, 0, 0, WeightMetric::NonFinite) == 0);
}

TEST_CASE("a momentum blow-up planted in one head scales only that head's S, and a bad factor is one line", "[engine]") {
  // Fault injection for the detector bench (bench/fault_bench: momentum_blowup).
  Engine engine(test::small_engine({"probe.every=1"}));
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(3));
  engine.wait_idle();
  const Frame before = log->frames.back();
  Command blowup = targeted(Command::Kind::ScaleMomentum, 1, 0);
  blowup.value = "1000";
  engine.post(blowup);
  engine.post(Command::steps(1));
  engine.wait_idle();
  const Frame& after = log->frames.back();
  // The scaled head's ‖S‖ jumps by orders of magnitude; the other head of that layer does not.
  CHECK(after.weight(1, 0, 0, WeightMetric::NormS) > 50 * before.weight(1, 0, 0, WeightMetric::NormS));
  CHECK(after.weight(1, 1, 0, WeightMetric::NormS) < 5 * before.weight(1, 1, 0, WeightMetric::NormS));
  CHECK(after.weight(0, 0, 0, WeightMetric::NormS) < 5 * before.weight(0, 0, 0, WeightMetric::NormS));
  const auto events = engine.events();
  CHECK(std::any_of(events.begin(), events.end(),
                    [](const Event& e) { return e.message.find("scale momentum by 1000 (layer 1 head 0)") != std::string::npos; }));

  Command bad = targeted(Command::Kind::ScaleMomentum, 0, 0);
  bad.value = "lots";
  engine.post(bad);
  engine.post(Command::steps(1));
  engine.wait_idle();
  const auto later = engine.events();
  CHECK(std::any_of(later.begin(), later.end(), [](const Event& e) {
    return e.kind == EventKind::Error && e.message.find("scale momentum: 'lots' is not a number") != std::string::npos;
  }));
  CHECK(engine.status().steps.front() == 5);
}

TEST_CASE("a corrupt batch planted in training raises that step's loss alone, and a rewind plants it again", "[engine]") {
  // The same run twice, once with the fault before step 9.
  auto run = [](bool corrupt) {
    Engine engine(test::small_engine({"engine.mode=train"}));
    auto log = std::make_shared<test::FrameLog>();
    engine.add_sink(log);
    engine.start();
    engine.post(Command::steps(8));
    if (corrupt) engine.post(Command{Command::Kind::CorruptBatch});
    engine.post(Command::steps(2));
    engine.wait_idle();
    if (corrupt) {  // back to step 9: re-run from the keyframe at 8, the logged fault lands again
      engine.post(Command::rewind(9));
      engine.wait_idle();
    }
    return log->of_timeline(0);
  };
  const auto clean = run(false), faulty = run(true);
  REQUIRE(clean.size() == 10);
  REQUIRE(faulty.size() >= 11);
  CHECK(test::same_frame(clean[7], faulty[7]));
  // This early the model is near chance on clean batches too (the fault bench measures the spike
  // on a trained model): here the check is that step 9 trained on other data.
  CHECK(faulty[8].loss != clean[8].loss);
  CHECK_FALSE(test::same_frame(clean[9], faulty[9]));  // the weights took the bad step
  CHECK(test::same_frame(faulty[8], faulty.back()));   // the re-run after the rewind, bit for bit
}

TEST_CASE("a NaN gate planted for one step shows in that head alone, is named, and a rewind plants it again", "[engine]") {
  // Fault injection for the detector bench (bench/fault_bench: nan_gate): issue 19's "a NaN in a gate".
  Engine engine(test::small_engine({"probe.every=1"}));
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(3));
  Command nan_gate = targeted(Command::Kind::NanGate, 0, 1);
  nan_gate.value = "lr";
  engine.post(nan_gate);
  engine.post(Command::steps(1));
  engine.wait_idle();
  const Frame faulty = log->frames.back();
  REQUIRE(faulty.step == 4);
  CHECK(std::isnan(faulty.head(0, 1, HeadMetric::Lr)));
  CHECK(std::isfinite(faulty.head(0, 0, HeadMetric::Lr)));
  const auto events = engine.events();
  CHECK(std::any_of(events.begin(), events.end(), [](const Event& e) {
    return e.kind == EventKind::NonFinite && e.step == 4 && e.layer == 0 && e.head == 1 && e.tensor == "lr";
  }));
  CHECK(std::any_of(events.begin(), events.end(),
                    [](const Event& e) { return e.message.find("NaN in the lr gate (layer 0 head 1) for the next step") != std::string::npos; }));
  // One step only: the gate reads its own value again at the next step (its memory stays NaN).
  engine.post(Command::steps(1));
  engine.wait_idle();
  REQUIRE(log->frames.back().step == 5);
  CHECK(std::isfinite(log->frames.back().head(0, 1, HeadMetric::Lr)));
  // A rewind to the faulty step re-runs it from a keyframe, and the logged fault lands again.
  engine.post(Command::rewind(4));
  engine.wait_idle();
  const auto rerun = engine.ring()->latest();
  REQUIRE(rerun);
  const Frame& again = *rerun;
  REQUIRE(again.step == 4);
  CHECK(std::isnan(again.head(0, 1, HeadMetric::Lr)));
  CHECK(again.head(0, 0, HeadMetric::Lr) == faulty.head(0, 0, HeadMetric::Lr));

  Command bad = targeted(Command::Kind::NanGate, 0, 0);
  bad.value = "gamma";
  engine.post(bad);
  engine.wait_idle();
  const auto later = engine.events();
  CHECK(std::any_of(later.begin(), later.end(), [](const Event& e) {
    return e.kind == EventKind::Error && e.message.find("nan gate: 'gamma' is not a gate (retain, lr or momentum)") != std::string::npos;
  }));
}

TEST_CASE("bad commands give one-line error events and the engine keeps going", "[engine]") {
  Engine engine(test::small_engine());
  engine.start();
  engine.post(Command::set_knob("train.lrr", "1"));
  engine.post(Command::set_knob("train.lr", "99"));
  engine.post(targeted(Command::Kind::ResetMemory, 7, 0));
  Command load{Command::Kind::LoadCheckpoint};
  load.path = "/nonexistent/run.safetensors";
  engine.post(load);
  engine.post(Command::steps(1));
  engine.wait_idle();
  std::vector<std::string> errors;
  for (const auto& e : engine.events())
    if (e.kind == EventKind::Error) errors.push_back(e.message);
  REQUIRE(errors.size() == 4);
  CHECK(errors[0].find("train.lrr") != std::string::npos);
  CHECK(errors[1].find("train.lr") != std::string::npos);
  CHECK(errors[2].find("layer 7") != std::string::npos);
  CHECK(errors[3].find("/nonexistent/run.safetensors") != std::string::npos);
  for (const auto& m : errors) CHECK(m.find('\n') == std::string::npos);
  CHECK(engine.status().steps.front() == 1);
}

TEST_CASE("a knob set while running lands between two steps: the run equals one paused there", "[engine]") {
  // Live: the command is posted while the engine runs, after a few steps.
  Engine engine(test::small_engine());
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  Command stop_at{Command::Kind::AddBreakpoint};
  stop_at.breakpoint = parse_breakpoint("step==16");
  engine.post(stop_at);
  engine.post(Command::run());
  while (!engine.ring()->latest() || engine.ring()->latest()->step < 3) std::this_thread::yield();
  engine.post(Command::set_knob("memory.lr.max", "0.25"));
  engine.wait_idle();
  int64_t landed = -1;
  for (const auto& e : engine.events())
    if (e.kind == EventKind::Command && e.message == "set memory.lr.max = 0.25") landed = e.step;
  REQUIRE(landed >= 3);
  REQUIRE(landed <= 16);

  // Reference: pause at that step, set the knob, go on. Wherever it landed, it landed whole.
  Engine check(test::small_engine());
  auto check_log = std::make_shared<FrameLog>();
  check.add_sink(check_log);
  check.start();
  check.post(Command::steps(landed));
  check.wait_idle();
  check.post(Command::set_knob("memory.lr.max", "0.25"));
  if (landed < 16) check.post(Command::steps(16 - landed));
  check.wait_idle();
  REQUIRE(check_log->frames.size() == 16);
  REQUIRE(log->frames.size() == 16);
  for (size_t i = 0; i < 16; ++i) CHECK(test::same_frame(log->frames[i], check_log->frames[i]));
  // The knob is live: from the step after it landed the lr gate is capped by max_lr = 0.25.
  if (landed < 16) {
    const Frame& after = log->frames[static_cast<size_t>(landed)];
    CHECK(after.head(0, 0, HeadMetric::Lr) < 0.26f);
  }
}

TEST_CASE("a step breakpoint stops the run at that step, a restart knob starts over", "[engine]") {
  Engine engine(test::small_engine());
  engine.start();
  Command b{Command::Kind::AddBreakpoint};
  b.breakpoint = parse_breakpoint("step==5");
  engine.post(b);
  engine.post(Command::run());
  engine.wait_idle();
  CHECK(engine.status().steps.front() == 5);
  CHECK(has_event(engine.events(), EventKind::Breakpoint));

  engine.post(Command::set_knob("model.layers", "1"));
  engine.post(Command::steps(2));
  engine.wait_idle();
  CHECK(engine.status().steps.front() == 2);
  CHECK(engine.status().preset.model.layers == 1);
  CHECK(engine.ring()->latest()->layers == 1);
}

TEST_CASE("a last step bounds the run: Run and Step stop there whenever posted, and are refused after it",
          "[engine]") {
  // A served training run's train.steps (app/cli/train_served.cpp). As a step breakpoint it fired
  // only at that step: a viewer's Run that arrived while the last step ran went on past it for good.
  Engine engine(test::small_engine());
  engine.set_last_step(5);
  engine.start();
  engine.post(Command::steps(3));
  engine.post(Command::run());  // lands after step 3; runs to 5 and stops there
  engine.wait_idle();
  CHECK(engine.status().steps.front() == 5);
  CHECK_FALSE(engine.status().running);
  CHECK(has_event(engine.events(), EventKind::Breakpoint));
  for (const Command& late : {Command::run(), Command::steps(2)}) {
    engine.post(late);
    engine.wait_idle();
    CHECK(engine.status().steps.front() == 5);
    CHECK(engine.status().last_error == "the run has taken all its 5 steps");
  }
  // Step(n) from below stops at the last step too, a command between still lands, and a Run
  // queued while the last step runs (the served run's race) is refused when it lands.
  Engine other(test::small_engine());
  other.set_last_step(4);
  other.start();
  other.post(Command::steps(2));
  other.post(Command::set_knob("memory.lr.max", "0.5"));
  other.post(Command::steps(10));
  other.post(Command::run());
  other.wait_idle();
  CHECK(other.status().steps.front() == 4);
  CHECK(other.status().preset.memory.max_lr == Approx(0.5));
  CHECK(other.status().last_error == "the run has taken all its 4 steps");
  CHECK_FALSE(other.status().running);
}

TEST_CASE("train and train+inspect modes make train frames and re-step the probe sequence", "[engine]") {
  Engine engine(test::small_engine({"engine.mode=train+inspect", "engine.inspect_every=2", "engine.inspect_tokens=3"}));
  auto log = std::make_shared<FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(8));
  engine.wait_idle();
  std::string kinds;
  for (const auto& f : log->frames) kinds += f.kind == FrameKind::Train ? 'T' : 'I';
  CHECK(kinds == "TTIIITTI");
  const Frame& train = log->frames[1];
  CHECK(train.train_step == 2);
  CHECK(std::isfinite(train.loss));
  CHECK(train.grad_norm > 0);
  CHECK(train.lr > 0);
  CHECK(train.layers == 2);
  CHECK(std::isnan(train.head(0, 0, HeadMetric::Retain)));  // no single token in a training step
  CHECK(train.weight(0, 0, 0, WeightMetric::NormM) > 0);
  // Each re-step starts the probe sequence again.
  CHECK(log->frames[2].token_index == 0);
  CHECK(log->frames[7].token_index == 0);
  CHECK(log->frames[2].token == log->frames[7].token);
}
