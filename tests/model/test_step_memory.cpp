// Training in the memory there is: train.micro_batch takes the same step a few sequences at a time,
// and a CPU step that would not fit stops at the allocation that passes the limit, says what would
// fit, and updates nothing (model/util/cpu_memory_watch.h, model/util/host_memory.h).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "model/train/trainer.h"
#include "model/util/cpu_memory_watch.h"
#include "model/util/host_memory.h"
#include "model/util/small_block_cache.h"
#include "support/small_preset.h"
#include "support/test_device.h"
#include "support/user_error_text.h"

namespace {

using namespace memscope::model;
using Catch::Matchers::Contains;
using memscope::test::error_of;
using memscope::test::small_preset;

std::map<std::string, at::Tensor> gradients(const Trainer& trainer) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : trainer.model()->named_parameters())
    if (item.value().grad().defined()) out[item.key()] = item.value().grad().detach().cpu().clone();
  return out;
}

std::map<std::string, at::Tensor> parameters(const Trainer& trainer) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : trainer.model()->named_parameters())
    out[item.key()] = item.value().detach().cpu().clone();
  return out;
}

std::string limit_gb(int64_t bytes) {
  std::ostringstream text;
  text.precision(17);
  text << "train.memory_limit_gb=" << static_cast<double>(bytes) / 1e9;
  return text.str();
}

// Whether memscope's allocator counts here; where it does not (AddressSanitizer, LibTorch ≥ 2.3,
// MEMSCOPE_SMALL_BLOCK_CACHE=0) a watch measures nothing and the check is off.
bool counted_here() {
  install_small_block_cache();
  if (small_block_cache_stats().installed) return true;
  WARN("memscope's CPU allocator is not installed here, so nothing is counted");
  return false;
}

}  // namespace

TEST_CASE("train.micro_batch: the same step, a few sequences at a time", "[train]") {
  // The reference is the whole batch in one forward and backward. Each group's losses are divided
  // by the whole batch's target count, so the groups' gradients add up to the same gradient; only
  // the order of the float sums differs. 5 rows in groups of 2 leaves a short last group.
  for (const std::string name : {"demo-mqar-titans", "demo-mqar-hope", "demo-mqar-atlas-mlp"})
    for (const std::string bptt : {"train.bptt=0", "train.bptt=6"}) {
      INFO(name << ", " << bptt);
      Trainer whole(small_preset(name, {"train.batch=5", "train.chunk=4", bptt}));
      Trainer grouped(small_preset(name, {"train.batch=5", "train.chunk=4", bptt, "train.micro_batch=2"}));
      const TrainStepResult a = whole.train_step(), b = grouped.train_step();
      CHECK(b.loss == Approx(a.loss).epsilon(1e-6));
      CHECK(b.acc == a.acc);
      CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(1e-5));
      REQUIRE(b.row_loss.size() == a.row_loss.size());
      for (size_t t = 0; t < a.row_loss.size(); ++t)
        if (std::isfinite(a.row_loss[t]))
          CHECK(b.row_loss[t] == Approx(a.row_loss[t]).epsilon(1e-5).margin(1e-6));
      const auto want = gradients(whole), got = gradients(grouped);
      REQUIRE(got.size() == want.size());
      REQUIRE_FALSE(want.empty());
      // Each parameter to 1e-4 of its largest gradient, or of a thousandth of the model's largest:
      // HOPE's self-modifying memories and the MLP memory's gates have gradients thousands of times
      // smaller than the rest, where the sums' order shows most. A group left out or counted twice
      // is off by tens of percent.
      double largest = 0;
      for (const auto& [key, g] : want) largest = std::max(largest, g.abs().max().item<double>());
      for (const auto& [key, g] : want) {
        INFO(key);
        const double scale = std::max(g.abs().max().item<double>(), 1e-3 * largest);
        CHECK((got.at(key) - g).abs().max().item<double>() <= 1e-4 * scale);
      }
      // AdamW divides by the root of the squared gradients, which magnifies the last bits of the
      // smallest ones: from the second step on the two runs agree to about 1e-4, not to the bit.
      CHECK(grouped.train_step().loss == Approx(whole.train_step().loss).epsilon(1e-4));
      // The state the step leaves (the probes read row 0 of it) is the first group's, row 0's. It is
      // computed from the parameters after step 1, where a gradient that is rounding noise in both
      // runs moved its parameter by ±lr (Adam normalises it) in either, which the memory carries.
      const auto &s = grouped.last_state().blocks.front().memory.memory,
                 &t = whole.last_state().blocks.front().memory.memory;
      if (!s.empty() && s.front().defined()) {
        CHECK(s.front().size(0) == 2);
        const double scale = std::max(1.0, t.front()[0].abs().max().item<double>());
        CHECK((s.front()[0] - t.front()[0]).abs().max().item<double>() < 1e-3 * scale);
      }
    }
}

TEST_CASE("cpu memory watch: counts this thread's tensors, not another's, and refuses one past its limit",
          "[train][allocator]") {
  if (!counted_here()) return;
  constexpr int64_t kMb = 1 << 20;
  {
    CpuMemoryWatch watch;
    REQUIRE(watch.counting());
    CpuMemoryWatch second;  // one at a time
    CHECK_FALSE(second.counting());
    CHECK(second.peak() == 0);
    at::Tensor four = torch::empty({kMb}, torch::kFloat);  // 4 MB
    CHECK(watch.peak() == 4 * kMb);
    four.reset();
    const at::Tensor one =
        torch::empty({kMb / 4}, torch::kFloat);  // 1 MB after the 4 MB went: the peak stays
    CHECK(watch.peak() == 4 * kMb);
    std::thread([] { torch::empty({4 * kMb}, torch::kFloat); }).join();  // another thread's 16 MB
    CHECK(watch.peak() == 4 * kMb);
  }
  {
    CpuMemoryWatch watch(3 * kMb + 4096);                          // room for sum()'s small results
    const at::Tensor two = torch::ones({kMb / 2}, torch::kFloat);  // 2 MB
    try {
      torch::ones({kMb / 2}, torch::kFloat);  // 2 MB more would be 4 of 3
      FAIL("the allocation past the limit went through");
    } catch (const CpuMemoryLimitReached& e) {
      CHECK(e.requested == 2 * kMb);
      CHECK(e.held == 2 * kMb);
      CHECK(e.limit == 3 * kMb + 4096);
      CHECK(std::string(e.what()) == "a tensor of 2.1 MB on top of 2.1 MB would pass the limit of 3.1 MB");
    }
    CHECK(watch.peak() == 2 * kMb);  // the refused block was never taken
    CHECK(torch::ones({kMb / 4}, torch::kFloat).sum().item<float>() == kMb / 4);  // 1 MB more still fits
    CHECK(two.sum().item<float>() == kMb / 2);
  }
  {
    // A counted block freed on another thread is taken off the count: 4 MB, freed there, then 4 MB
    // again here peaks at 4 MB, not 8.
    CpuMemoryWatch watch;
    at::Tensor handed = torch::empty({kMb}, torch::kFloat);
    std::thread([moved = std::move(handed)]() mutable { moved.reset(); }).join();
    const at::Tensor again = torch::empty({kMb}, torch::kFloat);
    CHECK(watch.peak() == 4 * kMb);
  }
  CpuMemoryWatch after;  // the watches above gave the process's one watch back
  CHECK(after.counting());
}

TEST_CASE(
    "cpu memory watch: run_watched counts a pass on a thread of its own, with the caller's grad mode and "
    "threads, and rethrows its stop",
    "[train][allocator]") {
  if (!counted_here()) return;
  constexpr int64_t kMb = 1 << 20;
  const at::Tensor w = torch::randn({256, 256}, torch::requires_grad());
  auto pass = [&] {
    at::Tensor x = torch::randn({512, 256});
    for (int i = 0; i < 8; ++i) x = torch::tanh(x.matmul(w));  // 8 saved activations of 512 kB
    x.sum().backward();
  };
  const std::optional<int64_t> whole = run_watched(0, pass);
  REQUIRE(whole);
  CHECK(*whole > 4 * kMb);
  w.mutable_grad() = at::Tensor();
  CHECK_THROWS_AS(run_watched(*whole - kMb, pass), CpuMemoryLimitReached);
  w.mutable_grad() = at::Tensor();
  // Nothing of the stopped pass is still counted: the same pass peaks as high as before.
  const std::optional<int64_t> after = run_watched(0, pass);
  REQUIRE(after);
  CHECK(*after == *whole);
  at::NoGradGuard no_grad;
  bool enabled = true;
  int threads = 0;
  const int before = at::get_num_threads();
  at::set_num_threads(before == 1 ? 2 : 1);  // not what a new thread starts with
  run_watched(0, [&] {
    enabled = at::GradMode::is_enabled();
    threads = at::get_num_threads();
  });
  CHECK_FALSE(enabled);
  CHECK(threads == at::get_num_threads());  // the same intra-op threads: the same sums
  at::set_num_threads(before);
}

TEST_CASE("train.memory_limit_gb: a step that does not fit stops, says what would fit, and updates nothing",
          "[train][allocator]") {
  if (!counted_here()) return;
  memscope::test::ScopedCpuDevice cpu;
  const std::vector<std::string> shape{"train.batch=8", "train.chunk=4"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), shape.begin(), shape.end());
    return small_preset("demo-mqar-titans", extra);
  };
  TrainStepResult free_step;
  {
    Trainer free_run(with({}));
    free_step = free_run.train_step();
    REQUIRE(free_step.memory_peak_bytes > 0);
    CHECK(free_run.train_step().memory_peak_bytes == 0);  // measured once per shape
  }
  SECTION("half the step's peak: refused at step 1, with a micro-batch that fits") {
    const std::string limit = limit_gb(free_step.memory_peak_bytes / 2);
    Trainer tight(with({limit}));
    const auto before = parameters(tight);
    const std::string error = error_of([&] { tight.train_step(); });
    CHECK_THAT(error, Contains("step 1 does not fit in memory: 8 sequences at once need about"));
    CHECK_THAT(error, Contains("train.memory_limit_gb allows"));
    CHECK_THAT(error, Contains("Nothing was updated."));
    CHECK(tight.step() == 0);
    CHECK(gradients(tight).empty());
    for (const auto& [key, p] : parameters(tight)) CHECK(at::equal(p, before.at(key)));
    std::smatch found;
    REQUIRE(std::regex_search(error, found, std::regex("train\\.micro_batch=([0-9]+)")));
    const int64_t micro = std::stoll(found[1]);
    CHECK(micro >= 1);
    CHECK(micro < 8);
    // Its advice holds: under the same limit, that many at a time trains, and the step is the same.
    Trainer fitted(with({limit, "train.micro_batch=" + std::to_string(micro)}));
    const TrainStepResult r = fitted.train_step();
    CHECK(r.memory_peak_bytes > 0);
    CHECK(r.memory_peak_bytes <= free_step.memory_peak_bytes / 2);
    CHECK(r.loss == Approx(free_step.loss).epsilon(1e-6));
  }
  SECTION("less than one sequence needs: the error says to cut the sequence") {
    Trainer tiny(with({"train.memory_limit_gb=0.000001"}));
    const std::string error = error_of([&] { tiny.train_step(); });
    CHECK_THAT(error, Contains("one sequence of"));
    CHECK_THAT(error, Contains("train.bptt"));
    CHECK(tiny.step() == 0);
  }
  SECTION("the whole step's peak: it fits") {
    Trainer exact(with({limit_gb(free_step.memory_peak_bytes)}));
    CHECK(exact.train_step().memory_peak_bytes == free_step.memory_peak_bytes);
  }
}

TEST_CASE("host memory: MemAvailable, the room under a cgroup's limit, and sizes in messages", "[train]") {
  CHECK(mem_available_from_meminfo(
            "MemTotal:       24683784 kB\nMemFree:  1 kB\nMemAvailable:   24161856 kB\n") ==
        int64_t{24161856} * 1024);
  CHECK_FALSE(mem_available_from_meminfo("MemTotal: 5 kB\n"));
  CHECK(memory_size_text(16'522'530'624) == "16.52 GB");
  CHECK(memory_size_text(350'200'000) == "350.2 MB");
  CHECK(memory_size_text(12'000) == "12.0 kB");
  CHECK(cgroup_memory_room("1000000\n", "400000\n", "anon 300000\ninactive_file 100000\n") == 700000);   // v2
  CHECK(cgroup_memory_room("1000000\n", "400000\n", "cache 5\ntotal_inactive_file 50000\n") == 650000);  // v1
  CHECK(cgroup_memory_room("1000\n", "4000\n", "") == 0);  // over its limit: no room
  CHECK_FALSE(cgroup_memory_room("max\n", "400000\n", ""));
  CHECK_FALSE(cgroup_memory_room("9223372036854771712\n", "4925673472\n", ""));  // v1's "no limit"
  CHECK_FALSE(cgroup_memory_room("12 GB\n", "1\n", ""));
  const std::optional<int64_t> free = host_memory_free();
  REQUIRE(free);  // Linux says
  CHECK(*free > 0);
}
