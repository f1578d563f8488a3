// Nothing passed on silently (issue 17): every chunk carries a CRC32C per tensor and a flipped byte
// is damage that names the tensor and the steps; old files without checksums read as
// "unverified"; step/seq columns that contradict the recording damage their own chunk only; a
// FIFO named like a chunk never blocks the reader.
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "model/session/chunk_order_check.h"
#include "model/session/crc32c.h"
#include "model/session/safetensors_blob_writer.h"
#include "model/session/safetensors_reader.h"
#include "model/session/session_export.h"
#include "model/session/replay.h"
#include "model/session/session_reader.h"
#include "model/session/session_writer.h"
#include "session/session_test_support.h"
#include "support/run_process.h"
#include "support/user_error_text.h"

using namespace memscope;
using namespace memscope::model;

namespace {

// A chunk rewritten with `edit` applied to its tensors' bytes; checksums are recomputed (so only
// the columns are wrong) unless `checksums` is false (a file from before checksums).
void rewrite(const std::filesystem::path& path, const std::function<void(const std::string&, std::vector<unsigned char>&)>& edit,
             bool checksums = true) {
  std::vector<std::vector<unsigned char>> data;
  std::vector<StBlob> blobs;
  std::map<std::string, std::string> metadata;
  {
    const SafetensorsFile file(path.string());
    metadata = file.header().metadata;
    for (const auto& t : file.header().tensors) {
      data.push_back(file.read(t));
      edit(t.name, data.back());
      blobs.push_back({t.name, t.dtype, t.shape, nullptr});
    }
  }
  for (size_t i = 0; i < blobs.size(); ++i) blobs[i].data = data[i].data();
  std::string bytes = encode_safetensors(blobs, metadata, path.string());
  if (!checksums) {
    // Drop the key and re-pad the header, as memscope wrote files before it had checksums.
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    auto header = nlohmann::json::parse(bytes.substr(8, n));
    header["__metadata__"].erase(kChecksumKey);
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    bytes = out + text + bytes.substr(8 + n);
  }
  write_file_atomically(path, bytes);
}

template <typename T>
void set_all(std::vector<unsigned char>& bytes, T value) {
  for (size_t i = 0; i + sizeof(T) <= bytes.size(); i += sizeof(T)) std::memcpy(bytes.data() + i, &value, sizeof(T));
}

// 20 steps in chunks of 5: frames-000000..000003.
std::filesystem::path recorded(const std::string& name) {
  const auto dir = test::fresh_session_dir(name) / "run.memscope";
  test::record_session(test::small_engine({"record.chunk_steps=5"}), dir, {Command::steps(20)});
  return dir;
}

bool damage_says(const SessionReader& s, const std::string& file, const std::string& text) {
  for (const auto& d : s.damage())
    if (d.file == file && d.reason.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("CRC32C matches the published check value, in hardware and in the table", "[session]") {
  const char* nine = "123456789";
  CHECK(crc32c(nine, 9) == 0xe3069283u);  // RFC 3720 B.4's check value
  CHECK(crc32c(nine + 4, 5, crc32c(nine, 4)) == 0xe3069283u);  // extends across pieces
  std::vector<unsigned char> zeros(32, 0);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8a9136aau);  // RFC 3720 B.4: 32 bytes of zeros
  uint32_t parsed = 0;
  CHECK(parse_crc32c_hex(crc32c_hex(0x0badf00du), parsed));
  CHECK(parsed == 0x0badf00du);
  CHECK_FALSE(parse_crc32c_hex("12345g78", parsed));
}

TEST_CASE("flipped bytes in a chunk are damage naming the tensor and steps, replay and export skip it", "[session]") {
  const auto dir = recorded("flipped");
  const auto chunk = dir / "frames-000001.safetensors";
  {
    const SafetensorsFile file(chunk.string());
    std::mt19937 rng(7);
    std::fstream f(chunk, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t size = std::filesystem::file_size(chunk);
    for (int i = 0; i < 30; ++i) {  // thirty bytes of the data section, as the sweep did
      const auto at = static_cast<std::streamoff>(file.header().data_start + rng() % (size - file.header().data_start));
      f.seekg(at);
      const char c = static_cast<char>(f.get());
      f.seekp(at);
      f.put(static_cast<char>(c ^ 0x5a));
    }
  }
  const SessionReader session(dir.string());
  CHECK(damage_says(session, "frames-000001.safetensors", "CRC32C"));
  CHECK(damage_says(session, "frames-000001.safetensors", "steps 6 to 10"));
  CHECK(session.steps(0) == std::vector<int64_t>({1, 2, 3, 4, 5, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}));
  CHECK(session.unverified_chunks() == 0);

  // Export passes the 15 intact frames on, never the damaged ones.
  const auto out = dir.parent_path() / "out.safetensors";
  CHECK(export_safetensors(session, out, {}).frames == 15);
  const auto cli = test::run_process({MEMSCOPE_CLI_BINARY, "inspect", dir.string()});
  CHECK(cli.exit_code == 1);
  CHECK(cli.output.find("fail") != std::string::npos);

  // A replay plays every intact step to the end.
  Replay replay(dir.string());
  replay.start();
  replay.post(Command::run());
  replay.wait_idle();
  CHECK(replay.status().steps == std::vector<int64_t>{20});
}

TEST_CASE("a file without checksums still reads, reported as unverified", "[session]") {
  const auto dir = recorded("unverified");
  rewrite(dir / "frames-000002.safetensors", [](const std::string&, std::vector<unsigned char>&) {}, false);
  const SessionReader session(dir.string());
  CHECK(session.damage().empty());
  CHECK(session.steps(0).size() == 20);
  CHECK(session.unverified_chunks() == 1);
  const auto cli = test::run_process({MEMSCOPE_CLI_BINARY, "inspect", dir.string()});
  CHECK(cli.exit_code == 0);
  CHECK(cli.output.find("checksums unverified: 1 of 4 chunks") != std::string::npos);
}

TEST_CASE("step and seq columns that contradict the recording damage their chunk, never the others", "[session]") {
  struct Case {
    const char* what;
    const char* tensor;
    std::function<void(std::vector<unsigned char>&)> edit;
    const char* reason;
  };
  const Case cases[] = {
      {"step -1", "step", [](auto& b) { set_all<int64_t>(b, -1); }, "out of range"},
      {"step 2^62", "step", [](auto& b) { set_all<int64_t>(b, int64_t{1} << 62); }, "out of range"},
      {"one step far ahead", "step", [](auto& b) { std::memcpy(b.data() + 16, "\xff\xff\xff\xff\xff\xff\x0f\x00", 8); },
       "ahead"},
      {"steps going back with no rewind", "step", [](auto& b) { set_all<int64_t>(b, 1); }, "no rewind"},
      {"every seq 0", "seq", [](auto& b) { set_all<int64_t>(b, 0); }, "seq"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    const auto dir = recorded("columns");
    rewrite(dir / "frames-000002.safetensors", [&](const std::string& name, std::vector<unsigned char>& bytes) {
      if (name == c.tensor) c.edit(bytes);
    });
    const SessionReader session(dir.string());
    CHECK(damage_says(session, "frames-000002.safetensors", c.reason));
    // The chunks before and after keep every frame: 1..10 and 16..20.
    CHECK(session.steps(0) == std::vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16, 17, 18, 19, 20}));
  }
}

TEST_CASE("the column check accepts what real recordings do: rewinds, re-runs, forks", "[session]") {
  // A rewind to 6 from a keyframe at 4: frames 5 and 6 re-run before the marker, then 7, 8, 9.
  ChunkOrderCheck check({{12, 6, 0}}, true, -1);
  CHECK(check.accept(0, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, std::vector<int32_t>(10, 0)) == "");
  CHECK(check.accept(1, {5, 6, 7, 8, 9}, {10, 11, 12, 13, 14}, std::vector<int32_t>(5, 0)) == "");
  // A fork (timeline 1) starts anywhere; it then advances a step a frame.
  CHECK(check.accept(2, {5, 6, 10}, {15, 16, 17}, {1, 1, 0}) == "");
  CHECK(check.accept(3, {9}, {18}, {1}) != "");  // 3 steps ahead within 2 frames
  // Without every event line, going back is not held against a chunk.
  ChunkOrderCheck lenient({}, false, -1);
  CHECK(lenient.accept(0, {4, 5, 1}, {0, 1, 2}, {0, 0, 0}) == "");
  CHECK(ChunkOrderCheck({}, true, -1).accept(0, {4, 5, 1}, {0, 1, 2}, {0, 0, 0}).find("no rewind") != std::string::npos);
  CHECK(ChunkOrderCheck({}, true, 2).accept(0, {1, 2, 3}, {0, 1, 2}, {0, 0, 0}).find("past the session") != std::string::npos);
}

TEST_CASE("a FIFO named like a chunk or the event log is damage, not a hang", "[session]") {
  const auto dir = recorded("fifo");
  REQUIRE(::mkfifo((dir / "frames-000004.safetensors").c_str(), 0644) == 0);
  const SessionReader session(dir.string());
  CHECK(damage_says(session, "frames-000004.safetensors", "not a regular file"));
  CHECK(session.steps(0).size() == 20);
  std::filesystem::remove(dir / "events.jsonl");
  REQUIRE(::mkfifo((dir / "events.jsonl").c_str(), 0644) == 0);
  const SessionReader without_events(dir.string());
  CHECK(damage_says(without_events, "events.jsonl", "not a regular file"));
  CHECK(without_events.steps(0).size() == 20);
  const auto cli = test::run_process({MEMSCOPE_CLI_BINARY, "inspect", dir.string()});
  CHECK(cli.exit_code == 1);
  CHECK(cli.output.find("not a regular file") != std::string::npos);
}

TEST_CASE("a failing disk pauses the engine at the first failed write, not after queue_mb of frames", "[session]") {
  Engine engine(test::small_engine());
  auto log = std::make_shared<test::FrameLog>();
  engine.add_sink(log);
  engine.start();
  engine.post(Command::steps(24));
  engine.wait_idle();
  const auto dir = test::fresh_session_dir("full") / "run.memscope";
  SessionInfo info = session_info_for(load_preset("demo-mqar"), "cpu (test)", 16);
  info.record.chunk_steps = 2;  // queue_mb stays at its 64 MB default: the old code ran on for all of it
  SessionWriter writer(dir, info);
  writer.on_frame(log->frames[0]);
  writer.on_frame(log->frames[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (writer.stats().frames_written < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::filesystem::remove_all(dir);  // the disk goes away
  size_t stopped_at = 0;
  bool failed = false;  // the writer has tried a chunk and said so
  for (size_t i = 2; i < log->frames.size() && stopped_at == 0; ++i) {
    try {
      writer.on_frame(log->frames[i]);
    } catch (const UserError& e) {
      CHECK(std::string(e.what()).find("held in memory") != std::string::npos);
      stopped_at = i;
    }
    // From the first whole chunk on (frames 3 and 4), the writer tries it before the next frame:
    // waited for, not slept for, so that a late writer thread on a loaded machine is still in time.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (i >= 3 && !failed && std::chrono::steady_clock::now() < until) {
      for (const Event& e : writer.take_notices())
        failed |= e.message.find("retried each second") != std::string::npos;
      if (!failed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  CHECK(stopped_at > 0);
  CHECK(stopped_at <= 6);  // the first failed chunk (frames 3 and 4) stops the next frame
  std::filesystem::create_directories(dir);
  writer.close();  // the frames held in memory reach the disk: none was lost
  CHECK(SessionReader(dir.string()).steps(0).size() == stopped_at - 1);
}
