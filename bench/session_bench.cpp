// Session benchmarks (issue 6), one JSON line each:
//   record_overhead  engine step throughput with and without a recording (interleaved reps)
//   bytes_per_1000   session bytes per 1,000 steps at the default cadence, f32 and f16 snapshots
//   seek             open a long session, then fetch random steps (cold and warm chunk cache)
//   export           export to one safetensors file and to CSV, in MB/s of output
// The long session is built from real frames: --real steps recorded from the engine, then written
// again and again with new step numbers until it has --long steps (a real 100k-step run takes
// minutes per 1,000 steps' worth of the demo on two cores; the bytes and layout are the same).
// Flags: --preset P (demo-mqar), --steps N per rep, --reps R, --real N, --long N, --threads T, --dir D.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/bench_timing.h"
#include "model/util/compute_threads.h"
#include "model/engine/engine.h"
#include "model/session/session_export.h"
#include "model/session/session_reader.h"
#include "model/session/session_writer.h"

using namespace memscope::model;
namespace fs = std::filesystem;

namespace {

using memscope::bench::median;

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t dir_bytes(const fs::path& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.file_size();
  return n;
}

class Keep : public FrameSink {
 public:
  void on_frame(const Frame& f) override { frames.push_back(f); }
  void on_event(const Event&) override {}
  std::vector<Frame> frames;
};

// Seconds for `steps` engine steps, recording to `record` when it is not empty.
double run_steps(const std::string& preset, const std::vector<std::string>& sets, int64_t steps, const fs::path& record,
                 std::vector<Frame>* keep = nullptr) {
  EngineOptions o;
  o.preset = preset;
  o.sets = sets;
  Engine engine(o);
  auto sink = std::make_shared<Keep>();
  if (keep) engine.add_sink(sink);
  engine.start();
  if (!record.empty()) {
    engine.post(Command::start_recording(record.string()));
    engine.wait_idle();
  }
  const auto start = Clock::now();
  engine.post(Command::steps(steps));
  engine.wait_idle();
  if (!record.empty()) engine.post(Command{Command::Kind::StopRecording});
  engine.wait_idle();  // the close (the last chunk) counts: a recording ends on disk
  const double seconds = since(start);
  if (keep) *keep = std::move(sink->frames);
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "demo-mqar";
  int64_t steps = 256, reps = 5, real = 1000, long_steps = 100000;
  int threads = 1;
  fs::path dir = fs::temp_directory_path() / "memscope-session-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--preset") preset = value;
    else if (flag == "--steps") steps = std::stoll(value);
    else if (flag == "--reps") reps = std::stoll(value);
    else if (flag == "--real") real = std::stoll(value);
    else if (flag == "--long") long_steps = std::stoll(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--dir") dir = value;
    else {
      std::cerr << "session_bench: unknown flag " << flag << "\n";
      return 2;
    }
  }
  memscope::model::set_compute_threads(threads);  // ATen and OpenBLAS
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<std::string> sets{"engine.mode=inspect"};

  // Recording overhead: off and on interleaved, the median of each.
  std::vector<double> off, on;
  for (int64_t r = 0; r < reps; ++r) {
    off.push_back(run_steps(preset, sets, steps, {}));
    on.push_back(run_steps(preset, sets, steps, dir / ("overhead-" + std::to_string(r))));
  }
  std::cout << nlohmann::json{{"bench", "record_overhead"}, {"preset", preset}, {"steps", steps}, {"reps", reps},
                              {"steps_per_s_off", steps / median(off)}, {"steps_per_s_recording", steps / median(on)},
                              {"overhead_pct", 100.0 * (median(on) / median(off) - 1.0)}}
                   .dump()
            << std::endl;

  // Bytes per 1,000 steps at the default cadence.
  std::vector<Frame> frames;
  for (const char* dtype : {"f32", "f16"}) {
    auto s = sets;
    s.push_back(std::string("record.matrix_dtype=") + dtype);
    const auto path = dir / (std::string("bytes-") + dtype + ".memscope");
    run_steps(preset, s, real, path, frames.empty() ? &frames : nullptr);
    const auto bytes = dir_bytes(path);
    std::cout << nlohmann::json{{"bench", "bytes_per_1000"}, {"matrix_dtype", dtype}, {"steps", real},
                                {"bytes", bytes}, {"bytes_per_1000_steps", 1000.0 * bytes / real}}
                     .dump()
              << std::endl;
  }

  // A long session from those real frames, renumbered.
  const auto long_path = dir / "long.memscope";
  {
    SessionInfo info = session_info_for(load_preset(preset, sets), "cpu (bench)", 0);
    SessionWriter writer(long_path, info);
    const auto start = Clock::now();
    for (int64_t i = 0; i < long_steps; ++i) {
      Frame f = frames[static_cast<size_t>(i) % frames.size()];
      f.step = i + 1;
      writer.on_frame(f);
    }
    writer.close();
    const double seconds = since(start);
    std::cout << nlohmann::json{{"bench", "write_long"}, {"steps", long_steps}, {"bytes", dir_bytes(long_path)},
                                {"seconds", seconds}, {"frames_per_s", long_steps / seconds}}
                     .dump()
              << std::endl;
  }
  {
    auto start = Clock::now();
    const SessionReader session(long_path.string());
    const double open_s = since(start);
    std::mt19937_64 rng(1);
    std::uniform_int_distribution<int64_t> pick(1, long_steps);
    std::vector<double> cold, warm;
    for (int i = 0; i < 200; ++i) {
      const int64_t step = pick(rng);
      start = Clock::now();
      const auto f = session.frame(0, step);
      cold.push_back(since(start));
      start = Clock::now();
      const auto g = session.frame(0, step + (step < long_steps ? 1 : -1));  // the same chunk, now cached
      warm.push_back(since(start));
      if (!f || !g) return 1;
    }
    std::cout << nlohmann::json{{"bench", "seek"}, {"steps", long_steps}, {"chunks", session.chunks().size()},
                                {"open_ms", open_s * 1e3}, {"random_step_cold_ms", median(cold) * 1e3},
                                {"random_step_warm_ms", median(warm) * 1e3}}
                     .dump()
              << std::endl;

    start = Clock::now();
    const auto st = export_safetensors(session, dir / "long.safetensors");
    const double st_s = since(start);
    start = Clock::now();
    const auto csv = export_csv(session, dir / "long.csv");
    const double csv_s = since(start);
    std::cout << nlohmann::json{{"bench", "export"}, {"steps", long_steps},
                                {"safetensors_mb", st.bytes / 1048576.0}, {"safetensors_mb_per_s", st.bytes / 1048576.0 / st_s},
                                {"csv_mb", csv.bytes / 1048576.0}, {"csv_mb_per_s", csv.bytes / 1048576.0 / csv_s}}
                     .dump()
              << std::endl;
  }
  fs::remove_all(dir);
  return 0;
}
