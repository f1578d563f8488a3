// HOPE's cost (issue 20). Three parts, one JSON line each, all ratios from the same run:
//  - "debugger_step": one token a call without gradients (the model's step), per token, the
//    chunkwise forms at T = 1 against the per-token references;
//  - "selfmod": the self-modifying memories alone, forward + outer backward, the chunkwise form
//    (forward) against the sequential reference (step per token, same chunk size b);
//  - "train_step": a demo-mqar-hope training step against a demo-mqar-atlas-mlp one, the two
//    trainers interleaved round by round, so that machine noise hits both alike.
// One thread (ATen and OpenBLAS). Flags: --reps R (5; medians), --steps N (training steps per round, 3),
// --tokens T (32: the selfmod part; the debugger_step part takes 4T), --batch B (16).
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_flags.h"
#include "bench/bench_timing.h"
#include "model/config/preset.h"
#include "model/memory/continuum_memory.h"
#include "model/memory/self_modifying_memory.h"
#include "model/train/trainer.h"
#include "model/util/allocator.h"
#include "model/util/compute_threads.h"
#include "model/util/small_block_cache.h"

using namespace memscope::model;
using memscope::bench::median;
using memscope::bench::seconds_of;

namespace {

void bench_selfmod(int64_t reps, int64_t tokens, int64_t batch) {
  const int64_t d = 64;  // demo-mqar's width
  SelfModOptions o;
  o.d_model = d;
  o.inner_clip = 1.0;
  torch::manual_seed(0);
  SelfModifyingMemory sm(o);
  const at::Tensor x = torch::randn({batch, tokens, d});
  for (const int64_t chunk : {int64_t{1}, int64_t{4}}) {
    auto chunkwise = [&] {
      SelfModState s = sm->initial_state(batch);
      (sm->forward(x, s, chunk).pow(2).mean() + s.aux.mean()).backward();
    };
    auto sequential = [&] {
      SelfModState s = sm->initial_state(batch);
      std::vector<at::Tensor> ys;
      for (int64_t t = 0; t < tokens; ++t) ys.push_back(sm->step(x.select(1, t), s, nullptr, chunk));
      (at::stack(ys, 1).pow(2).mean() + s.aux.mean()).backward();
    };
    chunkwise();  // warm-up
    std::vector<double> fast, slow;
    for (int64_t r = 0; r < reps; ++r) {
      fast.push_back(seconds_of(chunkwise));
      slow.push_back(seconds_of(sequential));
    }
    const double tps_fast = static_cast<double>(batch * tokens) / median(fast),
                 tps_slow = static_cast<double>(batch * tokens) / median(slow);
    std::cout << nlohmann::json{{"bench", "hope"},
                                {"case", "selfmod"},
                                {"chunk", chunk},
                                {"batch", batch},
                                {"tokens", tokens},
                                {"d", d},
                                {"chunkwise_tokens_per_s", tps_fast},
                                {"sequential_tokens_per_s", tps_slow},
                                {"chunkwise_over_sequential", tps_fast / tps_slow}}
                     .dump()
              << std::endl;
  }
}

// The debugger's path (engine/branch.cpp): one token a call, batch 1, no gradient, at train.chunk
// b = 1 and 4, demo-mqar-hope's memories. Per token: the self-modifying memories' and the CMS's
// chunkwise forms at T = 1 (what the model's step calls) against their per-token references, whose
// inner gradients are autograd's.
void bench_debugger_step(int64_t reps, int64_t tokens) {
  const int64_t d = 64;  // demo-mqar's width
  SelfModOptions o;
  o.d_model = d;
  o.inner_clip = 1.0;
  o.conv = true;
  o.shared_gates = true;
  torch::manual_seed(0);
  SelfModifyingMemory sm(o);
  CmsOptions c;
  c.d_model = d;
  c.periods = {1, 4, 16};
  c.inner_clip = 1.0;
  ContinuumMemory cms(c);
  const at::Tensor x = torch::randn({1, tokens, d});
  torch::NoGradGuard no_grad;
  for (const int64_t chunk : {int64_t{1}, int64_t{4}}) {
    auto selfmod = [&](bool reference) {
      SelfModState s = sm->initial_state(1);
      for (int64_t t = 0; t < tokens; ++t)
        reference ? sm->step(x.select(1, t), s, nullptr, chunk) : sm->forward(x.narrow(1, t, 1), s, chunk);
    };
    auto continuum = [&](bool reference) {
      CmsState s = cms->initial_state(1);
      for (int64_t t = 0; t < tokens; ++t)
        reference ? cms->step(x.select(1, t), s) : cms->forward(x.narrow(1, t, 1), s);
    };
    selfmod(false);  // warm-up
    continuum(false);
    std::vector<double> sm_step, sm_chunkwise, cms_step, cms_chunkwise;
    for (int64_t r = 0; r < reps; ++r) {
      sm_step.push_back(seconds_of([&] { selfmod(true); }));
      sm_chunkwise.push_back(seconds_of([&] { selfmod(false); }));
      cms_step.push_back(seconds_of([&] { continuum(true); }));
      cms_chunkwise.push_back(seconds_of([&] { continuum(false); }));
    }
    const double us = 1e6 / static_cast<double>(tokens);
    std::cout << nlohmann::json{{"bench", "hope"},
                                {"case", "debugger_step"},
                                {"chunk", chunk},
                                {"tokens", tokens},
                                {"d", d},
                                {"selfmod_step_us_per_token", median(sm_step) * us},
                                {"selfmod_chunkwise_us_per_token", median(sm_chunkwise) * us},
                                {"selfmod_step_over_chunkwise", median(sm_step) / median(sm_chunkwise)},
                                {"cms_step_us_per_token", median(cms_step) * us},
                                {"cms_chunkwise_us_per_token", median(cms_chunkwise) * us},
                                {"cms_step_over_chunkwise", median(cms_step) / median(cms_chunkwise)}}
                     .dump()
              << std::endl;
  }
}

void bench_train_step(int64_t reps, int64_t steps) {
  Trainer hope(load_preset("demo-mqar-hope")), atlas(load_preset("demo-mqar-atlas-mlp"));
  hope.train_step();  // warm-up
  atlas.train_step();
  std::vector<double> hope_s, atlas_s;
  for (int64_t r = 0; r < reps; ++r) {
    hope_s.push_back(seconds_of([&] {
                       for (int64_t i = 0; i < steps; ++i) hope.train_step();
                     }) /
                     static_cast<double>(steps));
    atlas_s.push_back(seconds_of([&] {
                        for (int64_t i = 0; i < steps; ++i) atlas.train_step();
                      }) /
                      static_cast<double>(steps));
  }
  std::cout << nlohmann::json{{"bench", "hope"},
                              {"case", "train_step"},
                              {"hope_s_per_step", median(hope_s)},
                              {"atlas_mlp_s_per_step", median(atlas_s)},
                              {"hope_over_atlas_mlp", median(hope_s) / median(atlas_s)},
                              {"rounds", reps},
                              {"steps_per_round", steps}}
                   .dump()
            << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  keep_large_blocks_in_heap();  // model/util/allocator.h
  install_small_block_cache();  // model/util/small_block_cache.h
  int64_t reps = 5, steps = 3, tokens = 32, batch = 16;
  memscope::bench::BenchFlags flags("hope_bench");
  flags.add("--reps", reps).add("--steps", steps).add("--tokens", tokens).add("--batch", batch);
  if (!flags.parse(argc, argv)) return 2;
  set_compute_threads(1);  // ATen and OpenBLAS
  bench_debugger_step(reps, 4 * tokens);
  bench_selfmod(reps, tokens, batch);
  bench_train_step(reps, steps);
  return 0;
}
