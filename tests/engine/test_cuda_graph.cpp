// engine.cuda_graph (model/nn/graphed_step.h, issue 23): the engine's inspect frames with the CUDA
// graph and without, across a knob change, a momentum reset and a rewind, each of which drops the
// graphs. On the CPU the knob changes nothing (bit for bit, no token graphed); under
// MEMSCOPE_TEST_DEVICE=cuda the graphed run takes most tokens through the graph and its frames
// agree with the eager run's to float32 tolerance.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "engine/engine_test_support.h"
#include "model/engine/branch.h"
#include "model/probe/frame_json.h"
#include "support/test_device.h"

using namespace memscope;
using namespace memscope::model;

namespace {

struct Run {
  std::vector<Frame> frames;
  int64_t graphed = 0;
};

Run run(bool graph) {
  auto options =
      test::small_engine({std::string("engine.cuda_graph=") + (graph ? "true" : "false"), "probe.every=1"});
  Branch branch(0, load_preset(options.preset, options.sets));
  Run out;
  std::vector<Event> events;
  auto steps = [&](int n) {
    for (int i = 0; i < n; ++i) out.frames.push_back(*branch.advance(events));
  };
  steps(16);
  branch.apply(Command::set_knob("memory.lr.max", "0.5"));
  steps(8);
  Command reset{Command::Kind::ResetMomentum};  // every layer and head
  branch.apply(reset);
  steps(8);
  branch.rewind(20, events, [&](const Frame& f) { out.frames.push_back(f); });
  steps(6);
  out.graphed = branch.tokens_graphed();
  return out;
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(b)); }

}  // namespace

TEST_CASE("engine.cuda_graph: the frames with the graph equal those without, across commands and a rewind",
          "[engine]") {
  const Run eager = run(false), graphed = run(true);
  CHECK(eager.graphed == 0);
  REQUIRE(graphed.frames.size() == eager.frames.size());
  if (test::test_device().is_cpu()) {
    CHECK(graphed.graphed == 0);  // a CPU model never takes the graph
    for (size_t i = 0; i < eager.frames.size(); ++i)
      CHECK(test::same_frame(graphed.frames[i], eager.frames[i]));
    return;
  }
  // Window 4: the first 3 tokens of each sequence step eagerly; every other token replays a graph,
  // captured first after each command or rewind (two a time: one per buffer parity).
  CHECK(graphed.graphed >= static_cast<int64_t>(graphed.frames.size()) / 3);
  for (size_t i = 0; i < eager.frames.size(); ++i) {
    const Frame &g = graphed.frames[i], &e = eager.frames[i];
    INFO("frame " << i << ", step " << e.step << ", token " << e.token_index);
    CHECK(g.step == e.step);
    CHECK(g.token == e.token);
    CHECK((std::isnan(e.loss) ? std::isnan(g.loss) : close(g.loss, e.loss)));
    REQUIRE(g.head_metrics.size() == e.head_metrics.size());
    for (size_t k = 0; k < e.head_metrics.size(); ++k)
      if (std::isfinite(e.head_metrics[k])) CHECK(close(g.head_metrics[k], e.head_metrics[k]));
  }
}

TEST_CASE("engine.cuda_graph: the events say once per model whether each graph captured, or why not",
          "[engine]") {
  // A GUI user does not see stderr: what became of the graphs is a Notice event (Branch::note_graphs).
  // On the CPU both graphs are forced on (as a test may), so both captures fail; on CUDA the knob
  // alone takes both graphs, and both capture.
  const bool cuda = test::test_device().is_cuda();
  auto options = test::small_engine({"engine.cuda_graph=true", "engine.mode=train+inspect",
                                     "engine.inspect_every=2", "engine.inspect_tokens=3", "probe.every=1"});
  Branch graphed(0, load_preset(options.preset, options.sets));
  options.sets.push_back("engine.cuda_graph=false");
  Branch plain(0, load_preset(options.preset, options.sets));
  if (!cuda) graphed.use_graphs(true);
  std::vector<Event> events, plain_events;
  for (int i = 0; i < 12; ++i) {
    const Frame got = *graphed.advance(events), want = *plain.advance(plain_events);
    if (!cuda) CHECK(test::same_frame(got, want));  // failed captures: the eager steps, the same bits
  }
  std::vector<Event> notices;
  for (const Event& e : events)
    if (e.kind == EventKind::Notice) notices.push_back(e);
  for (const Event& e : plain_events) CHECK(e.kind != EventKind::Notice);
  REQUIRE(notices.size() ==
          2);  // one per graph, though the inspect graph is made again after each training step
  for (const Event& e : notices) {
    INFO(e.message);
    CHECK(e.timeline == 0);
    CHECK(e.step >= 1);
    CHECK_THAT(e.message, Catch::StartsWith("engine.cuda_graph: the "));
    if (cuda)
      CHECK_THAT(e.message, Catch::EndsWith("runs as a CUDA graph"));
    else
      CHECK_THAT(e.message,
                 Catch::Contains("could not be captured and runs without the graph: a CUDA graph records "
                                 "CUDA work, and this model is on cpu"));
  }
  CHECK_THAT(notices[0].message + notices[1].message,
             Catch::Contains("inspect step") && Catch::Contains("training pass"));
  // Written and read back as any event (a recording's events.jsonl, the remote wire).
  Event back;
  REQUIRE(event_from_json(event_to_json(notices[0]), back));
  CHECK(back.kind == EventKind::Notice);
  CHECK(back.message == notices[0].message);
}

TEST_CASE("engine.cuda_graph: the status line says what the graphs did, or why a token was not graphed",
          "[engine]") {
  // Branch::graph_summary, shown on the GUI's status line (EngineStatus::graphs). On the CPU the
  // knob asks for no graph and the line is empty; a test forces the graphs on, as use_graphs may.
  // No section returns early: Catch finds a section only when a run reaches it.
  const bool cuda = test::test_device().is_cuda();
  std::vector<Event> events;
  auto advance = [&](Branch& b, int n) {
    for (int i = 0; i < n; ++i) b.advance(events);
  };
  // engine.overlap off: a token the CPU steps ahead, beside the last one's probes, is not offered
  // the graph (a GPU never steps ahead), and the counts below are of every token.
  auto options = test::small_engine({"engine.cuda_graph=true", "engine.overlap=false"});
  const Preset preset = load_preset(options.preset, options.sets);

  SECTION("the knob alone: nothing on the CPU; on CUDA, tokens replayed through captured graphs") {
    Branch branch(0, preset);
    advance(branch, 12);
    const std::string line = branch.graph_summary();
    INFO(line);
    if (!cuda) {
      CHECK(line.empty());
    } else {
      CHECK_THAT(line, Catch::StartsWith("step graph ") && Catch::Contains("/12 tokens, ") &&
                           Catch::Contains(" captures"));
      CHECK_THAT(line, !Catch::StartsWith("step graph 0/"));
    }
  }
  SECTION("the knob off on a CUDA model says so") {
    options.sets.push_back("engine.cuda_graph=false");
    Branch branch(0, load_preset(options.preset, options.sets));
    advance(branch, 2);
    CHECK(branch.graph_summary() == (cuda ? "CUDA graphs off (engine.cuda_graph)" : ""));
  }
  SECTION("a token the graph cannot take is counted, with why") {
    Branch branch(0, preset);
    branch.use_graphs(false);  // the graphs' buffers, stepped eagerly: offered every token, replaying none
    CHECK(branch.graph_summary() == "CUDA graphs on, nothing stepped yet");
    advance(branch, 5);
    CHECK(branch.graph_summary() == "step graph 0/5 tokens");
    Command nan_gate{Command::Kind::NanGate};
    nan_gate.layer = 0;
    nan_gate.head = 1;
    nan_gate.value = "lr";
    branch.apply(nan_gate);
    advance(branch, 1);
    CHECK(branch.graph_summary() == "step graph 0/6 tokens; not: a gate override is in force");
  }
  SECTION("a failed capture is said, on the status line as in the events") {
    auto train = test::small_engine({"engine.mode=train+inspect", "engine.inspect_every=2",
                                     "engine.inspect_tokens=3", "engine.overlap=false"});
    Branch branch(0, load_preset(train.preset, train.sets));
    branch.use_graphs(true);
    advance(branch, 6);
    const std::string line = branch.graph_summary();
    INFO(line);
    if (cuda)
      CHECK_THAT(line, Catch::StartsWith("step graph ") && Catch::Contains(" | training graph "));
    else
      CHECK(line ==
            "step graph failed, stepping eagerly (the events say why) | training graph failed, training "
            "eagerly "
            "(the events say why)");
  }
  SECTION("HOPE's step branches on the host, and the line says so") {
    auto hope = test::small_engine({"engine.cuda_graph=true", "engine.overlap=false"});
    hope.preset = "demo-mqar-hope";
    Branch branch(0, load_preset(hope.preset, hope.sets));
    branch.use_graphs(false);
    advance(branch, 2);
    CHECK(branch.graph_summary() == "step graph 0/2 tokens; not: a HOPE block's step branches on the host");
  }
}

TEST_CASE("engine.cuda_graph: the engine's status carries the main timeline's graph line", "[engine]") {
  Engine engine(test::small_engine({"engine.cuda_graph=true"}));
  engine.start();
  engine.post(Command::steps(4));
  engine.wait_idle();
  const std::string graphs = engine.status().graphs;
  INFO(graphs);
  if (test::test_device().is_cuda())
    CHECK_THAT(graphs, Catch::StartsWith("step graph ") && Catch::Contains("/4 tokens"));
  else
    CHECK(graphs.empty());
}
