// engine.overlap (issue 20): while an inspect token's probes are measured the next token is stepped,
// with the side thread measuring the probes (SideJob::Probes) or stepping the token
// (SideJob::NextToken). The frames and events must be the ones the engine thread alone makes, bit
// for bit, whatever commands, faults, rewinds and mode changes come in between.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/engine_test_support.h"
#include "model/engine/branch.h"
#include "model/util/cpu_quota.h"
#include "model/util/side_thread.h"
#include "support/test_device.h"

using namespace memscope;
using namespace memscope::model;

namespace {

// Whether a branch steps tokens ahead here: on a CPU with a spare core. A one-core machine has none,
// and a CUDA model never does (its step is asynchronous already: Branch::can_step_ahead), so under
// MEMSCOPE_TEST_DEVICE=cuda these tests check the frames alone.
bool steps_ahead_here() { return SideThread::spare_cores() > 0 && test::test_device().is_cpu(); }

Command on_layer(Command::Kind kind, int layer, int head = -1, std::string value = {}) {
  Command c{kind};
  c.layer = layer;
  c.head = head;
  c.value = std::move(value);
  return c;
}

// Each branch gets the same script: steps, then a command, and so on; every frame and event is kept.
struct Script {
  std::vector<Frame> frames;
  std::vector<Event> events;
  int64_t stepped_ahead = 0;
  int64_t taken_across_switch = 0;  // tokens stepped ahead one way and taken the other
};

Script run_script(bool overlap, SideJob job = SideJob::Probes) {
  auto options = test::small_engine({std::string("engine.overlap=") + (overlap ? "true" : "false"),
                                     "engine.inspect_every=3", "probe.every=1"});
  Branch branch(0, load_preset(options.preset, options.sets));
  branch.set_side_job(job);
  branch.overlap_gauge().set_adapts(false);  // every probed token overlapped: the counts below are exact
  Script out;
  auto steps = [&](int n) {
    for (int i = 0; i < n; ++i) out.frames.push_back(*branch.advance(out.events));
  };
  steps(9);
  branch.apply(Command::set_knob("memory.lr.max", "0.5"));
  steps(3);
  branch.apply(on_layer(Command::Kind::ResetMomentum, 1));
  steps(2);
  branch.apply(on_layer(Command::Kind::ScaleMomentum, 0, 1, "50"));
  steps(2);
  branch.apply(on_layer(Command::Kind::NanGate, 0, 0, "lr"));
  steps(2);
  branch.apply(Command::set_knob("probe.every", "2"));  // probed and unprobed steps alternate
  steps(6);  // the last is probed (step 24): the token of step 25 is in hand, stepped the first way
  // The other side job from here: the token in hand is taken all the same, and the next one is
  // stepped the other way, in hand when the side job switches back (and the command drops it).
  branch.set_side_job(job == SideJob::Probes ? SideJob::NextToken : SideJob::Probes);
  const int64_t ahead_before_switch = branch.tokens_stepped_ahead();
  steps(2);
  out.taken_across_switch = branch.tokens_stepped_ahead() - ahead_before_switch;
  branch.set_side_job(job);
  branch.apply(Command::set_knob("probe.every", "1"));
  steps(2);
  std::vector<Event> rewind_events;
  branch.rewind(20, rewind_events, [&](const Frame& f) { out.frames.push_back(f); });
  steps(4);
  branch.apply(on_layer(Command::Kind::InjectNan, 1, 0));
  steps(2);
  branch.apply(Command::set_knob("engine.mode", "\"train+inspect\""));
  steps(10);  // training steps, and the probe sequence re-stepped after every third
  out.stepped_ahead = branch.tokens_stepped_ahead();
  return out;
}

}  // namespace

TEST_CASE("engine.overlap: the tokens stepped ahead give the engine thread's frames and events bit for bit",
          "[engine]") {
  const Script alone = run_script(false);
  CHECK(alone.stepped_ahead == 0);
  for (SideJob job : {SideJob::Probes, SideJob::NextToken}) {
    INFO((job == SideJob::Probes ? "probes aside" : "next token aside"));
    const Script overlapped = run_script(true, job);
    // Every command drops the token in hand; with the next token aside a sequence start is stepped
    // on the engine thread. (A one-core machine has no spare core: nothing is stepped ahead, and
    // the frames still agree.)
    if (steps_ahead_here()) {
      CHECK(overlapped.stepped_ahead >= 12);
      CHECK(overlapped.taken_across_switch == 1);
    }
    REQUIRE(overlapped.frames.size() == alone.frames.size());
    for (size_t i = 0; i < alone.frames.size(); ++i) {
      INFO("frame " << i << ", step " << alone.frames[i].step);
      CHECK(test::same_frame(overlapped.frames[i], alone.frames[i]));
    }
    REQUIRE(overlapped.events.size() == alone.events.size());
    for (size_t i = 0; i < alone.events.size(); ++i) {
      CHECK(overlapped.events[i].step == alone.events[i].step);
      CHECK(overlapped.events[i].message == alone.events[i].message);
    }
  }
  // The planted faults reached the frames: the script is not trivially quiet.
  bool non_finite = false;
  for (const auto& f : alone.frames)
    for (float v : f.head_metrics) non_finite = non_finite || !std::isfinite(v);
  CHECK(non_finite);
}

TEST_CASE("engine.overlap: with the probes aside a new sequence's first token is stepped ahead too",
          "[engine]") {
  // A run of probed tokens across several sequences, no commands: with SideJob::Probes every token
  // but the first is stepped ahead (a new sequence is loaded on the engine thread while the probes
  // of the token before run aside); with SideJob::NextToken every token but each sequence's first.
  auto run = [](bool overlap, SideJob job, int64_t* ahead) {
    auto options =
        test::small_engine({std::string("engine.overlap=") + (overlap ? "true" : "false"), "probe.every=1"});
    Branch branch(0, load_preset(options.preset, options.sets));
    branch.set_side_job(job);
    branch.overlap_gauge().set_adapts(false);  // as in run_script
    std::vector<Frame> frames;
    std::vector<Event> events;
    for (int i = 0; i < 40; ++i) frames.push_back(*branch.advance(events));
    *ahead = branch.tokens_stepped_ahead();
    return frames;
  };
  int64_t none = 0, probes_aside = 0, next_aside = 0;
  const std::vector<Frame> alone = run(false, SideJob::Probes, &none);
  int64_t starts = 0;  // sequence starts after the first token
  for (size_t i = 1; i < alone.size(); ++i) starts += alone[i].token_index == 0;
  REQUIRE(starts >= 2);  // the script crosses sequences
  for (SideJob job : {SideJob::Probes, SideJob::NextToken}) {
    INFO((job == SideJob::Probes ? "probes aside" : "next token aside"));
    int64_t& ahead = job == SideJob::Probes ? probes_aside : next_aside;
    const std::vector<Frame> overlapped = run(true, job, &ahead);
    REQUIRE(overlapped.size() == alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      INFO("frame " << i << ", sequence " << alone[i].sequence << ", token " << alone[i].token_index);
      CHECK(test::same_frame(overlapped[i], alone[i]));
    }
  }
  CHECK(none == 0);
  if (steps_ahead_here()) {
    CHECK(probes_aside == 39);
    CHECK(next_aside == 39 - starts);
  }
}

TEST_CASE("engine.overlap: MLP-memory and HOPE models step ahead to the same frames", "[engine]") {
  for (const char* preset : {"demo-mqar-atlas-mlp", "demo-mqar-hope"}) {
    INFO(preset);
    std::vector<std::vector<Frame>> runs;
    std::vector<int64_t> ahead;
    for (const char* overlap : {"false", "true", "true"}) {  // the last: SideJob::NextToken
      auto options = test::small_engine({std::string("engine.overlap=") + overlap});
      Branch branch(0, load_preset(preset, options.sets));
      if (runs.size() == 2) branch.set_side_job(SideJob::NextToken);
      branch.overlap_gauge().set_adapts(false);  // as in run_script
      std::vector<Frame> frames;
      std::vector<Event> events;
      auto steps = [&](int n) {
        for (int i = 0; i < n; ++i) frames.push_back(*branch.advance(events));
      };
      steps(6);
      branch.apply(Command::set_knob("probe.every", "2"));
      steps(5);
      branch.rewind(4, events, [&](const Frame& f) { frames.push_back(f); });
      steps(4);
      runs.push_back(frames);
      ahead.push_back(branch.tokens_stepped_ahead());
    }
    for (size_t run = 1; run < runs.size(); ++run) {
      INFO("run " << run);
      if (steps_ahead_here()) CHECK(ahead[run] >= 6);
      REQUIRE(runs[0].size() == runs[run].size());
      for (size_t i = 0; i < runs[0].size(); ++i) CHECK(test::same_frame(runs[0][i], runs[run][i]));
    }
  }
}

TEST_CASE("engine.overlap: tokens stepped further while a snapshot frame's probes run give the same frames",
          "[engine]") {
  // Branch::step_further: at a snapshot frame (probe.matrices_every = 2 here) the engine thread steps
  // the tokens after it, to the end of the sequence or kMaxStepsFurther, and takes them at their
  // turns. UpToTheCap steps them whatever this machine's timing. Commands drop them, a switch to
  // SideJob::NextToken drops them, and an unprobed stretch takes them unprobed.
  for (const char* preset : {"demo-mqar", "demo-mqar-hope"}) {
    INFO(preset);
    auto run = [&](bool overlap, StepFurther further, int64_t* stepped_further) {
      auto options = test::small_engine(
          {std::string("engine.overlap=") + (overlap ? "true" : "false"), "probe.every=1"});
      Branch branch(0, load_preset(preset, options.sets));
      branch.overlap_gauge().set_adapts(false);  // as in run_script
      branch.set_step_further(further);
      std::vector<Frame> frames;
      std::vector<Event> events;
      auto steps = [&](int n) {
        for (int i = 0; i < n; ++i) frames.push_back(*branch.advance(events));
      };
      steps(20);  // across sequences
      branch.apply(Command::set_knob("memory.lr.max", "0.5"));
      steps(5);
      branch.apply(Command::set_knob("probe.matrices_every", "3"));
      steps(7);
      branch.set_side_job(SideJob::NextToken);
      steps(3);
      branch.set_side_job(SideJob::Probes);
      steps(4);
      branch.apply(Command::set_knob("probe.every", "2"));
      steps(5);
      branch.apply(Command::set_knob("probe.every", "1"));
      steps(3);
      branch.rewind(9, events, [&](const Frame& f) { frames.push_back(f); });
      steps(6);
      *stepped_further = branch.tokens_stepped_further();
      return std::make_pair(frames, events);
    };
    int64_t none = 0, up_to_cap = 0, while_running = 0;
    const auto alone = run(false, StepFurther::UpToTheCap, &none);
    CHECK(none == 0);  // nothing is stepped ahead without engine.overlap
    for (StepFurther further : {StepFurther::UpToTheCap, StepFurther::WhileProbesRun}) {
      INFO((further == StepFurther::UpToTheCap ? "up to the cap" : "while the probes run"));
      int64_t& count = further == StepFurther::UpToTheCap ? up_to_cap : while_running;
      const auto overlapped = run(true, further, &count);
      REQUIRE(overlapped.first.size() == alone.first.size());
      for (size_t i = 0; i < alone.first.size(); ++i) {
        INFO("frame " << i << ", step " << alone.first[i].step << ", sequence " << alone.first[i].sequence
                      << ", token " << alone.first[i].token_index);
        CHECK(test::same_frame(overlapped.first[i], alone.first[i]));
      }
      REQUIRE(overlapped.second.size() == alone.second.size());
      for (size_t i = 0; i < alone.second.size(); ++i) {
        CHECK(overlapped.second[i].step == alone.second[i].step);
        CHECK(overlapped.second[i].message == alone.second[i].message);
      }
    }
    if (steps_ahead_here()) CHECK(up_to_cap >= 10);
  }
}

TEST_CASE("engine.overlap: the tokens stepped further hold at most kMaxBytesFurther of states", "[engine]") {
  // demo-mqar-hope at d_model 256: a state is 46 MB (16 × the 2.9 MB at d_model 64), so one token
  // fits under the 64 MB and two do not. Each snapshot frame then steps one token further, and the
  // token after it (taken from hand, not a snapshot) none.
  auto options = test::small_engine({"engine.overlap=true", "probe.every=1", "model.d_model=256"});
  Branch branch(0, load_preset("demo-mqar-hope", options.sets));
  branch.overlap_gauge().set_adapts(false);
  branch.set_step_further(StepFurther::UpToTheCap);
  std::vector<Event> events;
  int64_t snapshots = 0;
  for (int i = 0; i < 8; ++i) snapshots += !branch.advance(events)->matrices.empty();
  REQUIRE(snapshots == 4);  // probe.matrices_every = 2
  if (steps_ahead_here()) {
    CHECK(branch.tokens_stepped_further() >= 2);  // a sequence's end may leave a snapshot none
    CHECK(branch.tokens_stepped_further() <= snapshots);
  }
}

TEST_CASE(
    "engine.overlap: probed tokens measured in line while the overlap does not pay give the same frames",
    "[engine]") {
  // The side thread late for half a window of tokens (as on a busy machine; fed to the gauge here,
  // so that the test knows when): the next kFirstBackOff probed tokens are measured on the engine
  // thread and not stepped ahead, then the overlap resumes. The frames are the engine thread's alone.
  auto run = [](bool overlap, bool late, int64_t* ahead, int64_t* in_line) {
    auto options =
        test::small_engine({std::string("engine.overlap=") + (overlap ? "true" : "false"), "probe.every=1"});
    Branch branch(0, load_preset(options.preset, options.sets));
    // Tokens stepped further at a snapshot frame before the back-off would be taken from hand by
    // the tokens measured in line, as they should, and on a busy machine the counts below would
    // vary with how many there were: none are (StepFurther, the test case above).
    branch.set_step_further(StepFurther::Off);
    std::vector<Frame> frames;
    std::vector<Event> events;
    auto steps = [&](int n) {
      for (int i = 0; i < n; ++i) frames.push_back(*branch.advance(events));
    };
    steps(5);
    if (late)  // until a window's verdict: the tokens so far had started a window
      while (!branch.overlap_gauge().backing_off()) branch.overlap_gauge().overlapped(1e-3, 1e-4);
    branch.overlap_gauge().set_adapts(false);  // no verdicts from this machine's own timings
    steps(static_cast<int>(OverlapGauge::kFirstBackOff) + 15);
    *ahead = branch.tokens_stepped_ahead();
    *in_line = branch.overlap_gauge().tokens_in_line();
    return frames;
  };
  int64_t ahead = 0, in_line = 0;
  const std::vector<Frame> alone = run(false, false, &ahead, &in_line);
  CHECK(ahead == 0);
  for (bool late : {false, true}) {
    INFO((late ? "backing off" : "overlapping"));
    const std::vector<Frame> overlapped = run(true, late, &ahead, &in_line);
    REQUIRE(overlapped.size() == alone.size());
    for (size_t i = 0; i < alone.size(); ++i) {
      INFO("frame " << i << ", step " << alone[i].step);
      CHECK(test::same_frame(overlapped[i], alone[i]));
    }
    if (steps_ahead_here()) {
      CHECK(in_line == (late ? OverlapGauge::kFirstBackOff : 0));
      // Every token but the first is stepped ahead, but for the kFirstBackOff tokens that each
      // follow a token whose probes were measured in line.
      const int64_t tokens = 5 + OverlapGauge::kFirstBackOff + 15;
      CHECK(ahead == (late ? tokens - 1 - OverlapGauge::kFirstBackOff : tokens - 1));
    }
  }
}

TEST_CASE("engine.overlap: an engine with it and one without emit the same frames, with a fork too", "[engine]") {
  std::vector<std::vector<Frame>> runs;
  for (const char* overlap : {"false", "true"}) {
    Engine engine(test::small_engine({std::string("engine.overlap=") + overlap}));
    auto log = std::make_shared<test::FrameLog>();
    engine.add_sink(log);
    engine.start();
    engine.post(Command::steps(12));
    engine.post(Command::set_knob("memory.window.decay", "0.9"));
    engine.post(Command::steps(6));
    // Two timelines: each side thread steps its timeline's next token (SideJob::NextToken).
    engine.post(Command::fork(15, {"memory.lr.max=0.5"}));
    engine.post(Command::steps(8));
    engine.post(Command::rewind(8));
    engine.post(Command::steps(6));
    engine.wait_idle();
    runs.push_back(log->frames);
  }
  REQUIRE(runs[0].size() == runs[1].size());
  for (size_t i = 0; i < runs[0].size(); ++i) CHECK(test::same_frame(runs[0][i], runs[1][i]));
  const auto forked = std::count_if(runs[1].begin(), runs[1].end(), [](const Frame& f) { return f.timeline == 1; });
  CHECK(forked >= 14);  // the fork's frames from step 15 to its 8 steps later, and its 6 after the rewind
}

TEST_CASE("SideThread runs one job at a time, hands back what it threw, and waits for its job when destroyed",
          "[engine]") {
  int value = 0;
  {
    SideThread side;
    side.wait();  // nothing in hand: returns at once
    side.run([&] { value = 1; });
    side.wait();
    CHECK(value == 1);
    side.run([] { throw std::runtime_error("the step failed"); });
    CHECK_THROWS_WITH(side.wait(), "the step failed");
    side.wait();  // told once
    side.run([&] { value = 2; });
    side.run([&] { value = value * 10; });  // waits for the first
    side.wait();
    CHECK(value == 20);
    side.run([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      value = 3;
    });
  }  // the destructor waits for the job in hand
  CHECK(value == 3);
}

TEST_CASE("SideThread spins through a wait like its last one, and sleeps soon after a long pause", "[engine]") {
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  CHECK(SideThread::spin_budget(microseconds(0)) == microseconds(200));      // nothing known yet
  CHECK(SideThread::spin_budget(microseconds(60)) == microseconds(200));     // a fast machine's hand-over
  CHECK(SideThread::spin_budget(microseconds(600)) == microseconds(1200));   // a 600 µs step: spun through
  CHECK(SideThread::spin_budget(milliseconds(3)) == milliseconds(4));        // at most 4 ms
  CHECK(SideThread::spin_budget(milliseconds(33)) == microseconds(200));     // paced at 30 steps/s: sleep
  // Jobs longer than the old fixed spin still hand over and come back in order.
  SideThread side;
  int value = 0;
  for (int i = 1; i <= 5; ++i) {
    side.run([&, i] {
      const auto until = std::chrono::steady_clock::now() + microseconds(700);
      while (std::chrono::steady_clock::now() < until) {
      }
      value = value * 10 + i;
    });
    side.wait();
  }
  CHECK(value == 12345);
}

TEST_CASE("SideThread::try_run takes a spare core, one fewer than the machine has, while its job runs", "[engine]") {
  const int spare = SideThread::spare_cores();
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CHECK(spare == std::min(machine, memscope::model::cgroup_cpu_limit().value_or(machine)) - 1);  // no affinity mask here
  std::vector<std::unique_ptr<SideThread>> sides;
  for (int i = 0; i <= spare; ++i) sides.push_back(std::make_unique<SideThread>());
  std::atomic<int> ran{0};
  // Jobs that hold their core until the test lets them go.
  std::atomic<bool> release{false};
  auto held = [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++ran;
  };
  for (int i = 0; i < spare; ++i) CHECK(sides[static_cast<size_t>(i)]->try_run(held));
  CHECK_FALSE(sides.back()->try_run([&] { ++ran; }));  // every spare core is busy: nothing runs
  release = true;
  for (auto& side : sides) side->wait();
  CHECK(ran == spare);
  // A job gives its core back when it returns, before anyone waits for it.
  if (spare > 0) {
    CHECK(sides.front()->try_run([&] { ++ran; }));
    while (sides.front()->busy()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(sides.back()->try_run([&] { ++ran; }));
    for (auto& side : sides) side->wait();
    CHECK(ran == spare + 2);
  }
}

TEST_CASE("cgroup CPU quotas: cpu.max and the v1 pair parse to CPUs, no quota and nonsense to none", "[engine]") {
  using memscope::model::cpus_from_cfs;
  using memscope::model::cpus_from_cpu_max;
  CHECK(cpus_from_cpu_max("150000 100000\n") == 1.5);
  CHECK(cpus_from_cpu_max("400000 100000") == 4.0);
  CHECK_FALSE(cpus_from_cpu_max("max 100000\n"));
  CHECK_FALSE(cpus_from_cpu_max(""));
  CHECK_FALSE(cpus_from_cpu_max("100000"));
  CHECK_FALSE(cpus_from_cpu_max("100000 0"));
  CHECK_FALSE(cpus_from_cpu_max("1e5 1e5 7"));
  CHECK_FALSE(cpus_from_cpu_max("fast 100000"));
  CHECK(cpus_from_cfs("50000\n", "100000\n") == 0.5);
  CHECK_FALSE(cpus_from_cfs("-1\n", "100000\n"));
  CHECK_FALSE(cpus_from_cfs("", "100000"));
  CHECK_FALSE(cpus_from_cfs("200000", "1x"));
  // This process's own limit, where it has one, is a whole number of CPUs, at least 1.
  if (const auto limit = memscope::model::cgroup_cpu_limit()) CHECK(*limit >= 1);
}
