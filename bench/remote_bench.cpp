// What serving costs the run (issue 22): steps per second of one engine with no server, served with
// no viewer, with one viewer attached over loopback, and with one stalled viewer (it said hello
// and never reads), interleaved repetitions in one run; and frame latency from the engine's emit
// to the viewer's ring. One JSON line per variant, then a summary.
//   remote_bench [--mode inspect|train] [--steps N] [--reps R] [--set KEY=VALUE ...]
#include <sys/socket.h>
#include <torch/torch.h>

#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "model/util/compute_threads.h"
#include "model/engine/engine.h"
#include "model/remote/remote_server.h"
#include "model/remote/remote_source.h"

using namespace memscope;

namespace {

// When each step's frame left the engine (steady seconds).
class EmitClock : public model::FrameSink {
 public:
  void on_frame(const model::Frame& f) override {
    std::lock_guard<std::mutex> lock(mutex_);
    at_[f.step] = model::steady_seconds();
  }
  void on_event(const model::Event&) override {}
  double at(int64_t step) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = at_.find(step);
    return it == at_.end() ? -1 : it->second;
  }

 private:
  std::mutex mutex_;
  std::map<int64_t, double> at_;
};

struct Result {
  double seconds = 0;
  int64_t frames_missed = 0, bytes = 0;
  std::vector<double> latencies;  // seconds, per step the viewer saw
};

bool until(const std::function<bool()>& done, double seconds) {
  const double end = model::steady_seconds() + seconds;
  while (!done() && model::steady_seconds() < end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

Result run_once(const model::EngineOptions& options, const std::string& variant, int64_t steps) {
  model::Engine engine(options);
  auto clock = std::make_shared<EmitClock>();
  engine.add_sink(clock);
  std::shared_ptr<model::RemoteServer> server;
  if (variant != "plain") {
    model::ServeOptions o;
    o.token = "bench";
    server = std::make_shared<model::RemoteServer>(engine, o);
    engine.add_sink(server);
  }
  engine.start();
  if (server) server->start();
  std::unique_ptr<model::RemoteSource> viewer;
  model::Socket stalled;
  if (variant == "viewer") {
    model::AttachOptions a;
    a.endpoint = server->endpoint();
    a.token = "bench";
    viewer = std::make_unique<model::RemoteSource>(a);
    viewer->start();
  } else if (variant == "stalled") {
    stalled = model::connect_to(server->endpoint(), 5);
    const int small = 4096;  // a small receive buffer: the stall shows sooner
    setsockopt(stalled.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    const std::string hello = model::encode_message(model::MessageType::Hello, model::encode_hello({"bench", "stalled"}));
    ::send(stalled.fd(), hello.data(), hello.size(), MSG_NOSIGNAL);
  }
  if (server) until([&] { return server->viewers() == (variant == "plain" || variant == "served" ? 0 : 1); }, 10);

  Result r;
  std::atomic<bool> done{false};
  std::thread watcher;
  if (viewer)  // when each step's frame reached the viewer's ring
    watcher = std::thread([&] {
      int64_t seen = 0;
      double progress = model::steady_seconds();
      while (seen < steps) {
        const auto latest = viewer->ring(0)->latest();
        const int64_t now = latest ? latest->step : 0;
        const double t = model::steady_seconds();
        if (now > seen) {
          for (int64_t s = seen + 1; s <= now; ++s)
            if (const double e = clock->at(s); e > 0) r.latencies.push_back(t - e);
          seen = now;
          progress = t;
        } else if (done && t - progress > 2) {
          break;  // the rest was dropped for this viewer
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the latency's resolution
      }
    });
  r.seconds = bench::seconds_of([&] {
    engine.post(model::Command::steps(steps));
    engine.wait_idle();
  });
  done = true;
  if (watcher.joinable()) watcher.join();
  if (viewer) {
    until([&] { return viewer->status().steps.front() >= steps; }, 10);
    r.frames_missed = viewer->status().frames_missed;
    r.bytes = viewer->bytes_received();
    viewer->stop();
  }
  if (server) server->stop();
  engine.stop();
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "inspect";
  int64_t steps = 0, reps = 5;
  std::vector<std::string> sets;
  bench::BenchFlags flags("remote_bench");
  flags.add("--mode", mode).add("--steps", steps).add("--reps", reps).add("--set", sets);
  if (!flags.parse(argc, argv)) return 2;
  memscope::model::set_compute_threads(1);  // ATen and OpenBLAS
  model::EngineOptions options;
  options.sets = sets;
  options.sets.push_back("engine.mode=" + mode);
  if (steps <= 0) steps = mode == "train" ? 40 : 3000;
  const std::vector<std::string> variants = {"plain", "served", "viewer", "stalled"};
  std::map<std::string, std::vector<double>> seconds;
  std::map<std::string, std::vector<double>> latencies;
  std::map<std::string, int64_t> missed, bytes;
  for (int64_t rep = 0; rep < reps; ++rep)
    for (const auto& v : variants) {  // interleaved: the machine's drift hits every variant alike
      const Result r = run_once(options, v, steps);
      seconds[v].push_back(r.seconds);
      latencies[v].insert(latencies[v].end(), r.latencies.begin(), r.latencies.end());
      missed[v] += r.frames_missed;
      bytes[v] += r.bytes;
    }
  const double plain = bench::median(seconds["plain"]);
  for (const auto& v : variants) {
    const double s = bench::median(seconds[v]);
    nlohmann::json j = {{"bench", "remote"},
                        {"mode", mode},
                        {"variant", v},
                        {"steps", steps},
                        {"reps", reps},
                        {"steps_per_s", steps / s},
                        {"throughput_vs_plain", plain / s}};
    if (v == "viewer") {
      j["frames_missed"] = missed[v];
      j["bytes_per_step"] = static_cast<double>(bytes[v]) / static_cast<double>(steps * reps);
      j["latency_ms_median"] = 1e3 * percentile(latencies[v], 0.5);
      j["latency_ms_p99"] = 1e3 * percentile(latencies[v], 0.99);
      j["latency_samples"] = latencies[v].size();
    }
    std::cout << j.dump() << std::endl;
  }
  return 0;
}
