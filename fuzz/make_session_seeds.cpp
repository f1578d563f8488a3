// Writes the seed corpus of fuzz_session into the directory given (fuzz/corpus/session): real
// chunks from ChunkBuilder (selector byte 0) and an events.jsonl (selector byte 1), kept small.
//   make_session_seeds fuzz/corpus/session
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "model/probe/frame_json.h"
#include "model/session/frame_chunk.h"

using namespace memscope::model;

namespace {

MatrixSnapshot snapshot(const std::string& tensor, int head, float base) {
  MatrixSnapshot m;
  m.layer = 0;
  m.head = head;
  m.weight = "M";
  m.tensor = tensor;
  m.rows = m.cols = 4;
  m.full_rows = m.full_cols = 8;
  for (int i = 0; i < 16; ++i) m.values.push_back(base + 0.25f * static_cast<float>(i));
  return m;
}

// Step `step`: probed frames have layers=1, heads=2, weights {"M"}; snapshots M (and dM) of head 0
// and S of head 1.
Frame frame(int64_t step, bool probed, bool snapshots, FrameKind kind) {
  Frame f;
  f.step = step;
  f.kind = kind;
  f.train_step = step;
  f.loss = 2.5 - 0.1 * static_cast<double>(step);
  f.seconds = 0.01;
  if (kind == FrameKind::Inspect) {
    f.sequence = 0;
    f.token_index = step;
    f.token = 7;
    f.target = 3;
    f.predicted = 3;
  } else {
    f.acc = 0.5;
    f.grad_norm = 1.0;
    f.lr = 1e-3;
  }
  if (probed) {
    f.layers = 1;
    f.heads = 2;
    f.weights = {"M"};
    for (int i = 0; i < 2 * kHeadMetricCount; ++i) f.head_metrics.push_back(0.1f * static_cast<float>(i));
    for (int i = 0; i < 2 * kWeightMetricCount; ++i) f.weight_metrics.push_back(static_cast<float>(i));
    f.weight_metrics[kWeightMetricCount + 2] = std::nanf("");
  }
  if (snapshots) {
    f.matrices.push_back(snapshot("M", 0, static_cast<float>(step)));
    if (kind == FrameKind::Inspect) f.matrices.push_back(snapshot("dM", 0, -1.0f));
    f.matrices.push_back(snapshot("S", 1, 0.5f));
  }
  return f;
}

void write_seed(const std::string& path, char selector, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.put(selector);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::printf("%s: %zu bytes\n", path.c_str(), bytes.size() + 1);
}

std::string chunk(MatrixDtype dtype, const std::vector<Frame>& frames) {
  RecordConfig config;
  config.matrix_dtype = dtype;
  ChunkBuilder b(config);
  for (const auto& f : frames) b.add(f);
  return b.encode("seed", 1700000000.0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_session_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  // An unprobed row first, then probed rows, two of them with snapshots.
  write_seed(dir + "/chunk_f32", 0,
             chunk(MatrixDtype::F32, {frame(1, false, false, FrameKind::Train), frame(2, true, true, FrameKind::Train),
                                      frame(3, true, true, FrameKind::Inspect)}));
  write_seed(dir + "/chunk_f16", 0,
             chunk(MatrixDtype::F16, {frame(4, true, true, FrameKind::Inspect), frame(5, true, false, FrameKind::Train)}));
  write_seed(dir + "/chunk_plain", 0,
             chunk(MatrixDtype::BF16, {frame(6, false, false, FrameKind::Train), frame(7, false, false, FrameKind::Train)}));
  std::string events;
  Event e;
  e.step = 3;
  e.kind = EventKind::Command;
  e.message = "set memory.lr 0.5";
  events += event_to_json(e).dump() + "\n";
  e.kind = EventKind::Spike;
  e.message = "layer 0 head 1 loss spiked";
  e.layer = 0;
  e.head = 1;
  e.tensor = "loss";
  e.value = 4.5;
  e.timeline = 1;
  events += event_to_json(e).dump() + "\n";
  events += "{\"event\": \"error\", \"step\": 9, \"timeline\": 0, \"messa";  // a torn last line
  write_seed(dir + "/events", 1, events);
  return 0;
}
