// The small-block cache that serves LibTorch's CPU storage (model/util/small_block_cache.h): freed
// blocks come back for the next tensor of their size class, data stays intact, and a model step
// gives the same bits with the cache as without it.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "model/config/preset.h"
#include "model/train/trainer.h"
#include "model/util/small_block_cache.h"

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
