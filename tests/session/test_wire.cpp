// The viewer/run wire (issue 22): framing, bounds, versions and the message codecs, and the fuzz
// corpus (fuzz/corpus/wire) under random mutations through the fuzzer's own input function.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "fuzz/wire_input.h"
#include "model/remote/wire.h"
#include "model/remote/wire_messages.h"

using namespace memscope::model;

namespace {

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("wire: messages split across reads in any way come out whole and in order", "[session]") {
  const std::string stream = encode_message(MessageType::Hello, encode_hello({"t", "c"})) +
                             encode_message(MessageType::Command, encode_command(Command::steps(3), 1)) +
                             encode_message(MessageType::Bye, encode_reason("done"));
  for (size_t piece : {size_t{1}, size_t{5}, size_t{12}, size_t{13}, stream.size()}) {
    WireDecoder d("test");
    std::vector<WireMessage> got;
    for (size_t at = 0; at < stream.size(); at += piece) {
      d.feed(stream.data() + at, std::min(piece, stream.size() - at));
      while (d.has_message()) got.push_back(d.pop());
    }
    REQUIRE(got.size() == 3);
    CHECK(got[0].type == MessageType::Hello);
    CHECK(decode_hello(got[0].payload, "test").token == "t");
    int64_t seq = 0;
    CHECK(decode_command(got[1].payload, "test", seq).count == 3);
    CHECK(seq == 1);
    CHECK(decode_reason(got[2].payload, "test") == "done");
    CHECK(d.buffered() == 0);
  }
}

TEST_CASE("wire: a wrong header is refused from the header alone, in one line", "[session]") {
  std::string header = encode_message(MessageType::Frames, "");
  header[8] = header[9] = header[10] = header[11] = '\xff';  // 4 GiB announced
  WireDecoder d("viewer 1.2.3.4:5");
  CHECK_THROWS_WITH(d.feed(header.data(), header.size()),
                    "viewer 1.2.3.4:5 sent a frames message of 4294967295 bytes, above the bound of 268435456");
  std::string other = encode_message(MessageType::Hello, "{}");
  other[4] = 2;
  WireDecoder v("the run at h:1");
  CHECK_THROWS_WITH(v.feed(other.data(), other.size()),
                    "the run at h:1 speaks memscope wire version 2, this memscope speaks 1: run the same memscope version "
                    "on both ends");
  std::string unknown = encode_message(MessageType::Hello, "{}");
  unknown[6] = 99;
  WireDecoder u("x");
  CHECK_THROWS_WITH(u.feed(unknown.data(), unknown.size()), "x sent a message of unknown type 99");
  WireDecoder h("x");
  CHECK_THROWS_WITH(h.feed("HTTP/1.1 200 OK\r\n", 17), "x does not speak memscope's wire (no \"MSCP\" header)");
  CHECK_THROWS_AS(encode_message(MessageType::Command, std::string(max_payload(MessageType::Command) + 1, 'x')), WireError);
}

TEST_CASE("wire: commands, status, events and frames survive a round trip", "[session]") {
  Command c{Command::Kind::Fork};
  c.step = 40;
  c.sets = {"memory.lr.max=0.5", "train.lr=0.01"};
  c.layer = 1;
  c.head = 2;
  c.timeline = 0;
  c.breakpoint = parse_breakpoint("ns_error>0.25");
  int64_t seq = 0;
  const Command d = decode_command(encode_command(c, 17), "t", seq);
  CHECK(seq == 17);
  CHECK(d.kind == Command::Kind::Fork);
  CHECK(d.step == 40);
  CHECK(d.sets == c.sets);
  CHECK(d.layer == 1);
  CHECK(d.head == 2);
  CHECK(d.breakpoint.kind == Breakpoint::Kind::NsError);
  CHECK(d.breakpoint.threshold == Approx(0.25));

  RemoteStatus s;
  s.running = true;
  s.idle = false;
  s.steps = {5, 2};
  s.preset_name = "demo-mqar";
  s.preset_toml = "[train]\nlr = 0.01\n";
  s.breakpoints = {c.breakpoint};
  s.frames_missed = 7;
  s.commands_taken = 3;
  s.graphs = "step graph 510/512 tokens, 4 captures";
  const RemoteStatus t = decode_status(encode_status(s), "t");
  CHECK(t.graphs == s.graphs);
  // A run from before the status said what its graphs do: none said, none shown.
  nlohmann::json older = nlohmann::json::parse(encode_status(s));
  older.erase("graphs");
  CHECK(decode_status(older.dump(), "t").graphs.empty());
  CHECK(t.running);
  CHECK_FALSE(t.idle);
  CHECK(t.steps == s.steps);
  CHECK(t.preset_toml == s.preset_toml);
  CHECK(t.breakpoints.size() == 1);
  CHECK(t.frames_missed == 7);
  CHECK(t.commands_taken == 3);

  Event e;
  e.step = 9;
  e.kind = EventKind::NsError;
  e.message = "NS error 0.4";
  e.layer = 1;
  e.head = 0;
  e.value = 0.4;
  const auto events = decode_events(encode_events({e, e}), "t");
  REQUIRE(events.size() == 2);
  CHECK(events[1].kind == EventKind::NsError);
  CHECK(events[1].value == Approx(0.4));

  Frame f;
  f.step = 3;
  f.timeline = 1;
  f.kind = FrameKind::Train;
  f.loss = 1.25;
  f.layers = 1;
  f.heads = 1;
  f.weights = {"M"};
  f.head_metrics.assign(kHeadMetricCount, 0.5f);
  f.weight_metrics.assign(kWeightMetricCount, 0.75f);
  const auto payloads = encode_frames({std::make_shared<const Frame>(f)});
  REQUIRE(payloads.size() == 1);
  const auto frames = decode_frames(payloads[0], "t");
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].step == 3);
  CHECK(frames[0].timeline == 1);
  CHECK(frames[0].loss == 1.25);
  CHECK(frames[0].head_metrics == f.head_metrics);

  CHECK_THROWS_WITH(decode_command("{\"kind\": \"run\"}", "viewer v", seq),
                    "viewer v sent a malformed command message: no \"seq\"");
  CHECK_THROWS_WITH(decode_status("[1, 2", "the run"), Catch::Contains("is not JSON"));
}

TEST_CASE("wire: the fuzz corpus under random mutations is decoded or refused in one line, never worse", "[session]") {
  const std::filesystem::path corpus = std::filesystem::path(MEMSCOPE_SOURCE_DIR) / "fuzz/corpus/wire";
  std::mt19937 random(20261124);
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    const std::string seed = read_bytes(entry.path());
    REQUIRE(seed.size() > 1);
    ++seeds;
    memscope::fuzz::decode_wire_input(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    for (int i = 0; i < 1500; ++i) {
      std::string m = seed;
      const int edits = 1 + static_cast<int>(random() % 4);
      for (int k = 0; k < edits; ++k) {
        const size_t at = random() % m.size();
        switch (random() % 4) {
          case 0: m[at] = static_cast<char>(random()); break;
          case 1: m.erase(at, 1 + random() % 16); break;
          case 2: m.insert(at, std::string(1 + random() % 8, static_cast<char>(random()))); break;
          case 3: m.resize(at + 1); break;
        }
        if (m.empty()) m = "x";
      }
      // Aborts (failing the test program) on anything but a one-line UserError.
      memscope::fuzz::decode_wire_input(reinterpret_cast<const uint8_t*>(m.data()), m.size());
    }
  }
  CHECK(seeds >= 3);
}
