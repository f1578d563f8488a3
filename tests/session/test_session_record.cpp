// Recording and replay parity (issue 6): the frames read back from a session, and the frames a
// Replay plays, equal the live frames bit for bit; rewinds and forks inside a recording come back
// as the engine left each timeline; f16/bf16 snapshots come back rounded exactly as stored.
#include "model/session/half_float.h"
#include "model/session/replay.h"
#include "model/session/session_reader.h"
#include "session/session_test_support.h"
#include "support/run_process.h"

#include <algorithm>
#include <set>

using namespace memscope;
using namespace memscope::model;
using test::FrameLog;

namespace {

Command start_recording(const std::filesystem::path& dir) { return Command::start_recording(dir.string()); }

std::shared_ptr<FrameLog> record(const EngineOptions& options, const std::filesystem::path& dir,
                                 const std::vector<Command>& commands) {
  return test::record_session(options, dir, commands);
}

// The live timeline as the engine left it: later frames of a step replace earlier ones, and a
// frame at or before the newest step drops the frames after it (a rewind).
std::vector<Frame> final_timeline(const std::vector<Frame>& frames, int timeline) {
  std::vector<Frame> out;
  for (const auto& f : frames) {
    if (f.timeline != timeline) continue;
    while (!out.empty() && out.back().step >= f.step) out.pop_back();
    out.push_back(f);
  }
  return out;
}

}  // namespace

TEST_CASE("a recording reads back equal to the live frames, in every mode", "[session]") {
  for (const char* mode : {"inspect", "train", "train+inspect"}) {
    INFO(mode);
    const auto dir = test::fresh_session_dir(std::string("parity-") + mode) / "run.memscope";
    // Chunks of 7 rows, so the 40 frames span several files and a partial last one.
    const auto options = test::small_engine({std::string("engine.mode=") + mode, "engine.inspect_every=3",
                                             "record.chunk_steps=7", "probe.every=1"});
    const auto log = record(options, dir, {Command::steps(40)});
    REQUIRE(log->frames.size() == 40);

    const SessionReader session(dir.string());
    CHECK(session.damage().empty());
    CHECK(session.loss().closed);
    CHECK(session.loss().frames_lost == 0);
    CHECK(session.chunks().size() == 6);
    CHECK(session.frame_count() == 40);
    REQUIRE(session.timelines() == 1);
    REQUIRE(session.steps(0).size() == 40);
    for (const auto& live : log->frames) {
      const auto back = session.frame(0, live.step);
      REQUIRE(back);
      CHECK(test::identical_frames(*back, live));
    }
    CHECK_FALSE(session.frame(0, 41));
    // Training frames carry their batch row (tokens, targets, token losses), and it came back.
    if (std::string(mode) != "inspect") {
      const auto train = std::find_if(log->frames.begin(), log->frames.end(),
                                      [](const Frame& f) { return f.kind == FrameKind::Train; });
      REQUIRE(train != log->frames.end());
      CHECK_FALSE(train->batch_tokens.empty());
      CHECK(session.frame(0, train->step)->batch_tokens == train->batch_tokens);
    }
    // Snapshots were recorded (probe.matrices_every=2) with their shapes.
    CHECK_FALSE(session.frame(0, 2)->matrices.empty());
    CHECK(session.info().closed);
    CHECK(session.info().frames == 40);
    CHECK(std::string(to_string(session.preset().engine.mode)) == mode);
  }
}

TEST_CASE("a replay plays the recorded frames and events into rings, like the engine", "[session]") {
  const auto dir = test::fresh_session_dir("replay") / "run.memscope";
  const auto options = test::small_engine({"record.chunk_steps=5", "detect.spike_warmup=2", "detect.spike_threshold=1"});
  const auto log = record(options, dir, {Command::steps(23)});

  Replay replay(dir.string());
  auto played = std::make_shared<FrameLog>();
  replay.add_sink(played);
  replay.start();
  replay.post(Command::steps(10));
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{10});
  CHECK_FALSE(replay.status().live);
  replay.post(Command::run());
  replay.wait_idle();  // runs to the end of the recording and pauses there
  REQUIRE(played->frames.size() == log->frames.size());
  for (size_t i = 0; i < log->frames.size(); ++i) CHECK(test::identical_frames(played->frames[i], log->frames[i]));
  const auto ring = replay.ring(0);
  REQUIRE(ring);
  CHECK(ring->latest()->step == 23);
  CHECK(ring->history().size() == 23);
  const auto events = replay.events();
  CHECK(std::any_of(events.begin(), events.end(), [](const Event& e) { return e.message.rfind("end of the recording", 0) == 0; }));
  // The recorded detector events come back at their steps.
  size_t live_detector = 0, replayed_detector = 0;
  for (const auto& e : log->events) live_detector += e.is_detector();
  for (const auto& e : events) replayed_detector += e.is_detector();
  CHECK(replayed_detector == live_detector);

  // Seek back and forth: the ring ends at the step sought, and playing on gives the same frames.
  replay.post(Command::rewind(8));
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{8});
  CHECK(replay.ring(0)->latest()->step == 8);
  CHECK(replay.ring(0)->history().size() == 8);
  replay.post(Command::steps(2));
  replay.wait_idle();
  CHECK(test::identical_frames(*replay.ring(0)->latest(), log->frames[9]));
  replay.post(Command::rewind(20));
  replay.wait_idle();
  CHECK(replay.ring(0)->latest()->step == 20);

  // Read-only: a knob change is refused with one line, and the replay stays usable.
  replay.post(Command::set_knob("train.lr", "0.1"));
  replay.wait_idle();
  CHECK(replay.status().last_error.find("read-only") != std::string::npos);
  replay.post(Command::steps(1));
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{21});
}

TEST_CASE("breakpoints stop a replay at the recorded event", "[session]") {
  const auto dir = test::fresh_session_dir("replay-break") / "run.memscope";
  const auto log = record(test::small_engine({"detect.spike_warmup=2", "detect.spike_threshold=1"}), dir, {Command::steps(30)});
  int64_t first_spike = 0;
  for (const auto& e : log->events)
    if (e.kind == EventKind::Spike && first_spike == 0) first_spike = e.step;
  REQUIRE(first_spike > 0);  // a threshold of 1 sigma fires in 30 steps

  Replay replay(dir.string());
  replay.start();
  Command b{Command::Kind::AddBreakpoint};
  b.breakpoint = parse_breakpoint("spike");
  replay.post(b);
  replay.post(Command::run());
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{first_spike});
}

TEST_CASE("rewinds and forks inside a recording read back as the engine left each timeline", "[session]") {
  const auto dir = test::fresh_session_dir("rewind") / "run.memscope";
  const auto log = record(test::small_engine({"record.chunk_steps=4"}), dir,
                          {Command::steps(12), Command::rewind(6), Command::steps(3), Command::fork(5, {"probe.every=1"}),
                           Command::steps(2)});
  const SessionReader session(dir.string());
  REQUIRE(session.timelines() == 2);
  for (int t = 0; t < 2; ++t) {
    const auto expected = final_timeline(log->frames, t);
    const auto steps = session.steps(t);
    REQUIRE(steps.size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(steps[i] == expected[i].step);
      CHECK(test::identical_frames(session.frame_at(t, i), expected[i]));
    }
  }
  CHECK(session.steps(0).back() == 11);  // rewound to 6, then 3 steps and 2 more
}

TEST_CASE("f16 and bf16 snapshots store each value rounded once, record.matrix_every thins them", "[session]") {
  for (const char* dtype : {"f16", "bf16"}) {
    INFO(dtype);
    const auto dir = test::fresh_session_dir(std::string("dtype-") + dtype) / "run.memscope";
    const auto log = record(test::small_engine({std::string("record.matrix_dtype=") + dtype, "record.matrix_every=4"}), dir,
                            {Command::steps(12)});
    const SessionReader session(dir.string());
    size_t with_matrices = 0;
    for (const auto& live : log->frames) {
      const auto back = session.frame(0, live.step);
      REQUIRE(back);
      CHECK(test::same_floats(back->head_metrics, live.head_metrics));  // metrics stay f32
      if (live.step % 4 != 0) {
        CHECK(back->matrices.empty());
        continue;
      }
      ++with_matrices;
      REQUIRE(back->matrices.size() == live.matrices.size());
      for (size_t m = 0; m < live.matrices.size(); ++m)
        for (size_t i = 0; i < live.matrices[m].values.size(); ++i) {
          const float v = live.matrices[m].values[i];
          const float stored = std::string(dtype) == "f16" ? half_to_float(float_to_half(v)) : bf16_to_float(float_to_bf16(v));
          CHECK(back->matrices[m].values[i] == stored);
        }
    }
    CHECK(with_matrices == 3);
  }
}

TEST_CASE("starting a recording late keeps the frames the engine still holds", "[session]") {
  const auto dir = test::fresh_session_dir("late") / "run.memscope";
  Engine engine(test::small_engine());
  engine.start();
  engine.post(Command::steps(6));
  engine.post(start_recording(dir));
  engine.post(Command::steps(4));
  engine.post(Command{Command::Kind::StopRecording});
  engine.wait_idle();
  const SessionReader session(dir.string());
  CHECK(session.steps(0).size() == 10);
  CHECK(session.steps(0).front() == 1);
  // A second recording into the same directory is refused, and loses nothing.
  engine.post(start_recording(dir));
  engine.wait_idle();
  CHECK(engine.status().last_error.find("not empty") != std::string::npos);
  CHECK(SessionReader(dir.string()).frame_count() == 10);
}

TEST_CASE("a live change of the snapshot size starts a new chunk and reads back exactly", "[session]") {
  const auto dir = test::fresh_session_dir("layout") / "run.memscope";
  const auto log = record(test::small_engine({"record.chunk_steps=100"}), dir,
                          {Command::steps(5), Command::set_knob("probe.downsample", "4"), Command::steps(5)});
  const SessionReader session(dir.string());
  CHECK(session.chunks().size() == 2);  // the 8x8 snapshots, then the 4x4 ones
  for (const auto& live : log->frames) CHECK(test::identical_frames(*session.frame(0, live.step), live));
  CHECK(session.frame(0, 10)->matrices.front().rows == 4);
}

TEST_CASE("after a rewind in a recording, the abandoned future's events go with its frames", "[session]") {
  const auto dir = test::fresh_session_dir("rewind-events") / "run.memscope";
  // Spikes fire often at a 1-sigma threshold; keyframes every 4 steps, so rewinding to 8 re-runs
  // nothing (8 is a keyframe) and only the marker event can cut the timeline back.
  const auto log = record(test::small_engine({"detect.spike_warmup=2", "detect.spike_threshold=1"}), dir,
                          {Command::steps(20), Command::rewind(8)});
  const SessionReader session(dir.string());
  CHECK(session.steps(0).size() == 8);
  CHECK(session.steps(0).back() == 8);
  for (const auto& e : session.events())
    if (e.is_detector()) CHECK(e.step <= 8);
  size_t live_after = 0;
  for (const auto& e : log->events) live_after += e.is_detector() && e.step > 8;
  CHECK(live_after > 0);  // there was something to drop
}

TEST_CASE("a replayed fork appears where it was made and moves in step with the main timeline", "[session]") {
  const auto dir = test::fresh_session_dir("replay-fork") / "run.memscope";
  const auto log = record(test::small_engine(), dir, {Command::steps(8), Command::fork(5, {}), Command::steps(3)});
  Replay replay(dir.string());
  auto played = std::make_shared<FrameLog>();
  replay.add_sink(played);
  replay.start();
  replay.post(Command::steps(7));
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{7, 0});
  replay.post(Command::steps(1));
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{8, 5});  // as live, right after the fork
  replay.post(Command::run());
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{11, 8});
  const auto live1 = final_timeline(log->frames, 1), played1 = played->of_timeline(1);
  REQUIRE(played1.size() == live1.size());
  for (size_t i = 0; i < live1.size(); ++i) CHECK(test::identical_frames(played1[i], live1[i]));
  // Seeking the main timeline back before the fork empties the fork's ring too.
  replay.post(Command::rewind(3));
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{3, 0});
  CHECK(replay.ring(1)->latest() == nullptr);
}

TEST_CASE("a restart knob or a new preset ends the recording of the old run, with an event", "[session]") {
  const auto dir = test::fresh_session_dir("restart") / "run.memscope";
  Engine engine(test::small_engine());
  engine.start();
  engine.post(start_recording(dir));
  engine.post(Command::steps(5));
  engine.post(Command::set_knob("train.seed", "7"));
  engine.post(Command::steps(3));
  engine.wait_idle();
  CHECK(engine.status().recording.empty());
  const SessionReader session(dir.string());
  CHECK(session.info().closed);
  CHECK(session.steps(0).size() == 5);  // the old run, whole
  CHECK(std::any_of(session.events().begin(), session.events().end(),
                    [](const Event& e) { return e.message.find("stopped: the run started over (train.seed") != std::string::npos; }));
}

TEST_CASE("HOPE's probes (CMS levels, self-modifying targets, per-feature gates) are recorded exactly", "[session]") {
  for (const char* preset : {"demo-mqar-hope", "gated-deltanet"}) {
    INFO(preset);
    const auto dir = test::fresh_session_dir(std::string("hope-") + preset) / "run.memscope";
    auto options = test::small_engine({"record.chunk_steps=5"});
    options.preset = preset;
    if (std::string(preset) == "gated-deltanet") options.sets.push_back("memory.dgd.per_feature=true");
    const auto log = record(options, dir, {Command::steps(12)});
    const SessionReader session(dir.string());
    REQUIRE(session.steps(0).size() == 12);
    bool hope_arrays = false;
    for (const auto& live : log->frames) {
      hope_arrays = hope_arrays || !live.cms_norm.empty() || !live.retain_feature.empty();
      CHECK(test::identical_frames(*session.frame(0, live.step), live));
    }
    CHECK(hope_arrays);
  }
}

TEST_CASE("a session saved after a rewind and a fork (Ctrl+S) replays every held frame", "[session]") {
  // Issue 19: the save wrote every event after every frame with one order, so the old rewind
  // marker cut the main timeline back to the rewind point on replay.
  const auto dir = test::fresh_session_dir("save-after-rewind") / "run.memscope";
  Engine engine(test::small_engine());
  engine.start();
  engine.post(Command::steps(20));
  engine.post(Command::rewind(10));
  engine.post(Command::steps(10));
  engine.post(Command::fork(15, {"memory.lr.max=0.5"}));
  engine.post(Command::steps(5));
  engine.wait_idle();
  std::vector<int64_t> held;
  for (const auto& f : engine.ring(0)->frames()) held.push_back(f->step);
  REQUIRE(held.back() == 25);
  engine.post(start_recording(dir));
  engine.post(Command{Command::Kind::StopRecording});
  engine.wait_idle();
  REQUIRE(engine.status().last_error.empty());

  const SessionReader session(dir.string());
  CHECK(session.damage().empty());
  CHECK(session.steps(0) == held);
  CHECK(session.steps(1).back() == 20);
  std::set<int64_t> orders;
  for (const auto& e : session.events()) orders.insert(e.order);
  CHECK(orders.size() > 1);  // events sit where they happened, not all after the last frame
  const auto inspect = test::run_process({MEMSCOPE_CLI_BINARY, "inspect", dir.string()});
  CHECK(inspect.exit_code == 0);

  Replay replay(dir.string());
  replay.start();
  replay.post(Command::run());
  replay.wait_idle();
  CHECK(replay.status().steps.front() == 25);
}
