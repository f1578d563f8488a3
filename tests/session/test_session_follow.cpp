// Following a session while it is recorded (issue 22's --follow, issue 21's "watch a distributed
// run through rank 0's session"): a Replay opened on a live recording plays the chunks that land
// after it opened, waits instead of ending at the last one on disk, and ends once the recording
// is closed.
#include <thread>

#include "model/session/replay.h"
#include "model/session/session_reader.h"
#include "session/session_test_support.h"

using namespace memscope;
using namespace memscope::model;
using test::FrameLog;

namespace {

// Waits until the session on disk holds at least `frames` frames (chunks land from the writer's
// own thread), up to 30 s.
bool wait_for_frames(const std::filesystem::path& dir, int64_t frames) {
  for (int i = 0; i < 300; ++i) {
    try {
      if (SessionReader(dir.string()).frame_count() >= frames) return true;
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

TEST_CASE("a followed session plays the chunks recorded after it opened, then ends when the recording closes",
          "[session]") {
  const auto dir = test::fresh_session_dir("follow") / "run.memscope";
  const auto options = test::small_engine({"record.chunk_steps=5", "probe.every=1"});
  Engine engine(options);
  auto live = std::make_shared<FrameLog>();
  engine.add_sink(live);
  engine.start();
  engine.post(Command::start_recording(dir.string()));
  engine.post(Command::steps(10));
  engine.wait_idle();
  REQUIRE(wait_for_frames(dir, 10));

  Replay follow(dir.string(), /*follow=*/true);
  CHECK(follow.following());
  auto played = std::make_shared<FrameLog>();
  follow.add_sink(played);
  follow.start();
  follow.post(Command::steps(10));
  follow.wait_idle();
  CHECK(follow.status().steps == std::vector<int64_t>{10});

  // Five more steps than are on disk: the replay waits for them instead of ending.
  follow.post(Command::steps(5));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // the Step(5) taken up
  while (follow.status().pending_steps != 5 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  CHECK(follow.status().steps == std::vector<int64_t>{10});
  CHECK(follow.status().pending_steps == 5);
  const auto events = follow.events();
  CHECK(std::none_of(events.begin(), events.end(),
                     [](const Event& e) { return e.message.rfind("end of the recording", 0) == 0; }));

  // The run goes on; its next chunk reaches the follower.
  engine.post(Command::steps(10));
  engine.wait_idle();
  REQUIRE(wait_for_frames(dir, 20));
  REQUIRE(follow.wait_idle_for(30));
  CHECK(follow.status().steps == std::vector<int64_t>{15});

  // The recording closes: the follower plays what is left and ends where the run ended.
  engine.post(Command{Command::Kind::StopRecording});
  engine.wait_idle();
  follow.post(Command::run());
  REQUIRE(follow.wait_idle_for(30));
  CHECK(follow.status().steps == std::vector<int64_t>{20});
  REQUIRE(played->frames.size() == 20);
  for (size_t i = 0; i < 20; ++i) CHECK(test::identical_frames(played->frames[i], live->frames[i]));
  const auto after = follow.events();
  CHECK(std::any_of(after.begin(), after.end(), [](const Event& e) { return e.message.rfind("end of the recording", 0) == 0; }));
}
