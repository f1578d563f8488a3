// Writes the seed corpus of fuzz_wire into the directory given (fuzz/corpus/wire): the streams a
// viewer and a run send each other, each prefixed with the read-size byte of fuzz/wire_input.h.
//   make_wire_seeds fuzz/corpus/wire
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "model/remote/wire.h"
#include "model/remote/wire_messages.h"

using namespace memscope::model;

namespace {

void write_seed(const std::string& dir, const std::string& name, char read_size, const std::string& stream) {
  std::ofstream(dir + "/" + name, std::ios::binary) << read_size << stream;
}

Frame probed_frame(int64_t step) {
  Frame f;
  f.step = step;
  f.kind = FrameKind::Train;
  f.train_step = step;
  f.loss = 3.0 - 0.1 * static_cast<double>(step);
  f.layers = 1;
  f.heads = 1;
  f.weights = {"M"};
  f.head_metrics.assign(kHeadMetricCount, 0.5f);
  f.weight_metrics.assign(kWeightMetricCount, 0.25f);
  MatrixSnapshot m;
  m.tensor = "M";
  m.weight = "M";
  m.rows = m.cols = m.full_rows = m.full_cols = 2;
  m.values = {1, 2, 3, 4};
  f.matrices.push_back(m);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  Command knob = Command::set_knob("train.lr", "0.01");
  Command breakpoint{Command::Kind::AddBreakpoint};
  breakpoint.breakpoint = parse_breakpoint("ns_error>0.3");
  write_seed(dir, "viewer", 7,
             encode_message(MessageType::Hello, encode_hello({"token", "memscope"})) +
                 encode_message(MessageType::Command, encode_command(Command::steps(5), 1)) +
                 encode_message(MessageType::Command, encode_command(knob, 2)) +
                 encode_message(MessageType::Command, encode_command(breakpoint, 3)));
  Welcome w;
  w.server = "memscope-cli train demo-mqar (pid 1)";
  w.run_id = "0123";
  w.label = "train demo-mqar";
  w.refused = {{"rewind", "why"}};
  RemoteStatus s;
  s.steps = {12, 3};
  s.preset_name = "demo-mqar";
  s.preset_toml = "[train]\nlr = 0.01\n";
  s.breakpoints = {breakpoint.breakpoint};
  s.graphs = "step graph 3/4 tokens, 2 captures; not: a gate override is in force";
  Event e;
  e.step = 4;
  e.kind = EventKind::Spike;
  e.message = "spike in loss";
  e.layer = 0;
  e.value = 3.5;
  std::string run = encode_message(MessageType::Welcome, encode_welcome(w)) +
                    encode_message(MessageType::Status, encode_status(s)) +
                    encode_message(MessageType::Events, encode_events({e}));
  for (const auto& payload : encode_frames({std::make_shared<const Frame>(probed_frame(1)), std::make_shared<const Frame>(probed_frame(2))}))
    run += encode_message(MessageType::Frames, payload);
  run += encode_message(MessageType::Notice, encode_reason("rewind: not from a viewer")) +
         encode_message(MessageType::Bye, encode_reason("the run finished at step 12"));
  write_seed(dir, "run", static_cast<char>(255), run);
  write_seed(dir, "run_small_reads", 0, run.substr(0, 400));
  return 0;
}
