// The small-block cache that serves LibTorch's CPU storage (model/util/small_block_cache.h): freed
// blocks come back for the next tensor of their size class, data stays intact, and a model step
// gives the same bits with the cache as without it; two threads can use it at once.
#include <torch/torch.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "model/config/preset.h"
#include "model/train/trainer.h"
#include "model/util/small_block_cache.h"
#include "support/test_device.h"

using namespace memscope::model;

namespace {

// demo-mqar's logits after one sequence, stepped as the engine steps them.
at::Tensor logits_after_steps() {
  at::NoGradGuard no_grad;
  Trainer trainer(load_preset("demo-mqar"));
  const LanguageModel& model = trainer.model();
  const at::Tensor sequence = trainer.training_batch(1).tokens.select(0, 0);
  LmState state = model->initial_state(1);
  at::Tensor logits;
  for (int64_t t = 0; t < sequence.size(0); ++t) logits = model->step(sequence.narrow(0, t, 1), state, 1, StepDetail::Record).logits;
  return logits.clone();
}

}  // namespace

TEST_CASE("small-block cache: blocks are reused, data intact, and a model's step is bit-identical", "[model][allocator]") {
  memscope::test::ScopedCpuDevice cpu;  // the cache is the CPU allocator's
  const at::Tensor before = logits_after_steps();  // with whichever allocator this process has so far
  install_small_block_cache();
  const SmallBlockCacheStats first = small_block_cache_stats();
#if defined(__SANITIZE_ADDRESS__)
  REQUIRE_FALSE(small_block_cache_supported());  // a cache would blind ASan's use-after-free checks
#endif
  if (!small_block_cache_supported()) {
    REQUIRE_FALSE(first.installed);
    return;
  }
  if (const char* s = std::getenv("MEMSCOPE_SMALL_BLOCK_CACHE"); s && std::string(s) == "0") return;
  REQUIRE(first.installed);

  {
    const at::Tensor a = torch::arange(1000, torch::kFloat);  // 4 KB: one size class
    REQUIRE(reinterpret_cast<uintptr_t>(a.data_ptr()) % 64 == 0);
  }
  const SmallBlockCacheStats freed = small_block_cache_stats();
  REQUIRE(freed.cached_bytes >= 4096);
  const at::Tensor b = torch::full({900}, 3.0f);  // the same class: takes the freed block back
  REQUIRE(small_block_cache_stats().reused == freed.reused + 1);
  REQUIRE(b.sum().item<float>() == 2700.0f);
  REQUIRE(reinterpret_cast<uintptr_t>(b.data_ptr()) % 64 == 0);

  const at::Tensor large = torch::ones({1 << 19});  // 2 MB: beyond the cache, straight from malloc
  REQUIRE(large.sum().item<float>() == static_cast<float>(1 << 19));
  const at::Tensor empty = torch::empty({0});
  REQUIRE(empty.numel() == 0);

  const at::Tensor after = logits_after_steps();
  REQUIRE(small_block_cache_stats().reused > freed.reused + 100);
  REQUIRE(at::equal(before, after));
}

TEST_CASE("small-block cache: two threads allocating and freeing each other's blocks at once keep every block whole",
          "[model][allocator]") {
  // With engine.overlap one thread steps while the other measures probes, and each frees tensors
  // the other made: both take and give back blocks at once, through the cache's one lock.
  install_small_block_cache();
  if (!small_block_cache_stats().installed) return;  // ASan, LibTorch ≥ 2.3 or MEMSCOPE_SMALL_BLOCK_CACHE=0
  const size_t reused_before = small_block_cache_stats().reused;
  constexpr int kRounds = 20000;
  std::mutex handed_mutex;
  std::vector<at::Tensor> handed;  // made by the producer, checked and freed by the consumer
  std::atomic<bool> done{false};
  std::atomic<int64_t> bad{0};
  auto fill = [](int64_t i) { return torch::full({16 << (i % 8)}, static_cast<float>(i % 1000)); };  // 64 B … 8 KB
  std::thread producer([&] {
    for (int64_t i = 0; i < kRounds; ++i) {
      at::Tensor mine = fill(i + 1);  // one of its own, freed here
      at::Tensor given = fill(i);
      {
        std::lock_guard<std::mutex> lock(handed_mutex);
        handed.push_back(given);
      }
      if (mine.min().item<float>() != static_cast<float>((i + 1) % 1000)) ++bad;
    }
    done = true;
  });
  int64_t checked = 0;
  while (!done || checked < kRounds) {
    std::vector<at::Tensor> batch;
    {
      std::lock_guard<std::mutex> lock(handed_mutex);
      batch.swap(handed);
    }
    for (const at::Tensor& t : batch) {
      const at::Tensor scratch = torch::zeros({16 << (checked % 8)});  // this thread takes blocks too
      if (t.numel() != (16 << (checked % 8)) || t.min().item<float>() != t.max().item<float>() ||
          t.max().item<float>() != static_cast<float>(checked % 1000) || scratch.abs().sum().item<float>() != 0.0f)
        ++bad;
      ++checked;
    }
  }  // each batch is freed here, on the thread that did not make it
  producer.join();
  CHECK(bad == 0);
  CHECK(checked == kRounds);
  const SmallBlockCacheStats after = small_block_cache_stats();
  CHECK(after.reused > reused_before + kRounds);
  CHECK(after.cached_bytes <= (128u << 20));
}
