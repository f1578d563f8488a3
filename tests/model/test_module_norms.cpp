// Per-module outer-loop probes (issue 18): every parameter has a named module; the per-module
// gradient norms equal norms of gradients taken independently by autograd in float64, one
// parameter at a time; the update ratios equal ‖Δθ‖/‖θ‖ computed by hand; the trainer reports them.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "support/test_device.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "model/config/preset.h"
#include "model/session/frame_chunk.h"
#include "model/train/module_norms.h"
#include "model/train/task_loss.h"
#include "model/train/trainer.h"

namespace {

using namespace memscope::model;

Preset tiny(const std::string& name, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets{"model.d_model=16", "model.memory_heads=2", "model.attention_heads=2", "model.layers=2",
                                "task.keys=8",      "task.values=8",        "task.pairs=2",            "task.queries=2",
                                "task.gap=2",       "train.batch=2",        "train.steps=4",           "train.warmup=1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_preset(name, sets);
}

}  // namespace

TEST_CASE("module norms: every parameter of every block kind lands in a named module", "[model]") {
  CHECK(module_of("block1.memory.w_k") == "layer1/memory.W_K");
  CHECK(module_of("block0.memory.gate_retain_w") == "layer0/memory.gate.retain");
  CHECK(module_of("block0.memory.gate_huber_delta_b") == "layer0/memory.gate.huber_delta");
  CHECK(module_of("block0.memory.w1_0") == "layer0/memory.M0");
  CHECK(module_of("block0.memory.ln_bias") == "layer0/memory.LN");
  CHECK(module_of("block2.attention.w_q") == "layer2/attention");
  CHECK(module_of("block0.norm_memory.weight") == "layer0/mixing");
  CHECK(module_of("block0.selfmod.M_k_w1_0") == "layer0/selfmod.M0");
  CHECK(module_of("embedding") == "embedding");
  CHECK(module_of("norm_out.weight") == "head.norm");
  const std::set<std::string> known{"W_Q", "W_K", "W_V", "gate.retain", "gate.lr", "gate.momentum", "gate.gamma",
                                    "gate.huber_delta", "M0", "conv", "feature_map", "LN"};
  for (const char* preset : {"demo-mqar", "demo-mqar-hope", "demo-mqar-titans"}) {
    for (const char* structure : {"linear", "mlp"}) {
      const Preset p = tiny(preset, {std::string("memory.structure=") + structure});
      LanguageModel model = build_model(p, 32);
      for (const auto& item : model->named_parameters()) {
        const std::string m = module_of(item.key());
        INFO(preset << " " << structure << ": " << item.key() << " -> " << m);
        const size_t slash = m.find('/');
        if (slash == std::string::npos) {
          CHECK((m == "embedding" || m == "head.norm"));
          continue;
        }
        const std::string part = m.substr(slash + 1);
        if (part.rfind("memory.", 0) == 0) CHECK(known.count(part.substr(7)) == 1);
        else CHECK((part == "attention" || part == "ffn" || part == "cms" || part == "mixing" ||
                    part.rfind("selfmod.", 0) == 0));
      }
    }
  }
}

TEST_CASE("module norms: gradient norms equal float64 autograd per parameter, update ratios equal ‖Δθ‖/‖θ‖",
          "[model]") {
  for (const char* structure : {"linear", "mlp"}) {
    INFO(structure);
    const Preset p = tiny("demo-mqar", {std::string("memory.structure=") + structure});
    torch::manual_seed(0);
    LanguageModel model = build_model(p, 32);
    model->to(torch::kFloat64);
    const at::Tensor tokens = torch::randint(32, {2, 9}).to(memscope::test::test_device()), targets = torch::randint(32, {2, 9}).to(memscope::test::test_device());
    auto loss_of = [&] {
      LmState state = model->initial_state(2);
      return summed_cross_entropy(model->forward(tokens, state, 4), targets);
    };
    std::vector<std::pair<std::string, at::Tensor>> params;
    for (const auto& item : model->named_parameters()) params.emplace_back(item.key(), item.value());

    // Independent: one autograd call per parameter, grouped by the expected module name.
    std::map<std::string, double> expected;
    for (const auto& [name, param] : params) {
      const at::Tensor g = torch::autograd::grad({loss_of()}, {param}, {}, false, false, /*allow_unused=*/true)[0];
      expected[module_of(name)] += g.defined() ? g.pow(2).sum().item<double>() : 0.0;
    }
    loss_of().backward();
    std::vector<at::Tensor> before;
    std::vector<ModuleNorm> modules = module_gradient_norms(params, &before);
    REQUIRE(modules.size() == expected.size());
    double largest = 0;
    for (const auto& m : modules) {
      INFO(m.name);
      CHECK(m.grad_norm == Approx(std::sqrt(expected.at(m.name))).epsilon(1e-10).margin(1e-14));
      largest = std::max(largest, m.grad_norm);
    }
    CHECK(largest > 1e-3);
    CHECK(largest_gradient(modules)->grad_norm == largest);

    // A hand-made step: θ ← θ − 0.01·g on every parameter.
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, param] : params)
        if (param.grad().defined()) param.sub_(0.01 * param.grad());
    }
    module_update_ratios(modules, params, before);
    std::map<std::string, std::pair<double, double>> by_hand;  // module → (‖Δθ‖², ‖θ‖²)
    for (size_t i = 0; i < params.size(); ++i) {
      auto& e = by_hand[module_of(params[i].first)];
      e.first += (params[i].second.detach() - before[i]).pow(2).sum().item<double>();
      e.second += before[i].pow(2).sum().item<double>();
    }
    for (const auto& m : modules) {
      INFO(m.name);
      const auto& e = by_hand.at(m.name);
      CHECK(m.update_ratio == Approx(std::sqrt(e.first / e.second)).epsilon(1e-10).margin(1e-15));
    }
  }
}

TEST_CASE("module norms: the trainer reports them each step, and train.module_norms=false turns them off", "[model]") {
  Trainer on(tiny("demo-mqar-titans"));
  const TrainStepResult r = on.train_step();
  REQUIRE_FALSE(r.modules.empty());
  double total = 0;
  for (const auto& m : r.modules) {
    total += m.grad_norm * m.grad_norm;
    CHECK(m.update_ratio >= 0.0);
  }
  CHECK(std::sqrt(total) == Approx(r.grad_norm).epsilon(1e-6));  // the modules partition the parameters
  Trainer off(tiny("demo-mqar-titans", {"train.module_norms=false"}));
  CHECK(off.train_step().modules.empty());
}

TEST_CASE("module norms: train frames carry them through a session chunk and back", "[model]") {
  Frame a, b;
  a.kind = b.kind = FrameKind::Train;
  a.step = 1;
  b.step = 2;
  for (Frame* f : {&a, &b}) {
    f->module_names = {"embedding", "layer0/memory.W_K", "layer0/memory.M0"};
    f->module_grad_norm = {0.5f * f->step, 2.0f, 1e4f};
    f->module_update_ratio = {1e-3f, 2e-3f, 3e-3f * f->step};
  }
  RecordConfig config;
  ChunkBuilder builder(config);
  builder.add(a);
  REQUIRE(builder.fits(b));
  builder.add(b);
  const std::string path = (std::filesystem::temp_directory_path() / "memscope-module-norms.safetensors").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << builder.encode(path, -1.0);
  }
  const std::vector<Frame> frames = decode_chunk(SafetensorsFile(path));
  REQUIRE(frames.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const Frame& want = i == 0 ? a : b;
    CHECK(frames[i].module_names == want.module_names);
    CHECK(frames[i].module_grad_norm == want.module_grad_norm);
    CHECK(frames[i].module_update_ratio == want.module_update_ratio);
  }
  Frame other = b;
  other.module_names[1] = "layer0/memory.W_Q";
  CHECK_FALSE(builder.fits(other));  // another module list starts another chunk
  std::filesystem::remove(path);
}
