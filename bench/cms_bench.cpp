// The continuum memory system's two forms (issue 8, DESIGN principle 4): forward(), which reads
// and differentiates each stretch between updates as one batch, against T calls of step(), per
// variant (sequential, independent, nested). One JSON line per variant and mode, with the ratio
// of the same run: "infer" is no-grad stepping, "train" adds the outer backward pass through every
// update (create_graph). Flags: --tokens T (512), --train-tokens T (64), --dim D (64),
// --periods "1,4,32,128", --reps R (3, the median is reported).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "model/util/compute_threads.h"
#include "model/memory/continuum_memory.h"

using namespace memscope::model;

namespace {

double median_seconds(int reps, const std::function<void()>& f) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t tokens = 512, train_tokens = 64, dim = 64;
  int reps = 3;
  std::string periods = "1,4,32,128";
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoll(next().c_str());
    else if (!std::strcmp(argv[i], "--train-tokens")) train_tokens = std::atoll(next().c_str());
    else if (!std::strcmp(argv[i], "--dim")) dim = std::atoll(next().c_str());
    else if (!std::strcmp(argv[i], "--reps")) reps = std::max(1, std::atoi(next().c_str()));
    else if (!std::strcmp(argv[i], "--periods")) periods = next();
    else {
      std::cerr << "usage: cms_bench [--tokens T] [--train-tokens T] [--dim D] [--periods \"1,4,32,128\"] [--reps R]\n";
      return 2;
    }
  }
  set_compute_threads(1);  // ATen and OpenBLAS
  for (CmsVariant variant : {CmsVariant::Sequential, CmsVariant::Independent, CmsVariant::Nested}) {
    CmsOptions o;
    o.d_model = dim;
    o.periods = parse_cms_periods(periods, "--periods");
    o.variant = variant;
    o.inner_clip = 1.0;
    torch::manual_seed(0);
    ContinuumMemory cms(o);
    for (const bool train : {false, true}) {
      const int64_t T = train ? train_tokens : tokens;
      const torch::Tensor x = torch::randn({1, T, dim});
      auto batched = [&] {
        torch::AutoGradMode grad(train);
        CmsState s = cms->initial_state(1);
        const torch::Tensor y = cms->forward(x, s);
        if (train) y.pow(2).mean().backward();
      };
      auto stepped = [&] {
        torch::AutoGradMode grad(train);
        CmsState s = cms->initial_state(1);
        std::vector<torch::Tensor> ys;
        for (int64_t t = 0; t < T; ++t) ys.push_back(cms->step(x.select(1, t), s));
        if (train) torch::stack(ys, 1).pow(2).mean().backward();
      };
      batched();  // warm-up (allocator, thread pool)
      const double forward_s = median_seconds(reps, batched), step_s = median_seconds(reps, stepped);
      std::cout << nlohmann::json{{"bench", "cms"},
                                  {"variant", to_string(variant)},
                                  {"mode", train ? "train" : "infer"},
                                  {"tokens", T},
                                  {"dim", dim},
                                  {"periods", periods},
                                  {"threads", at::get_num_threads()},
                                  {"forward_tokens_per_s", T / forward_s},
                                  {"step_tokens_per_s", T / step_s},
                                  {"ratio", step_s / forward_s}}
                       .dump()
                << std::endl;
    }
  }
  return 0;
}
