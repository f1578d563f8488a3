// memscope-cli memory-trace: one memory layer alone on a seeded random input, with every
// per-token quantity needed to recompute its recurrence elsewhere (issue 3), as safetensors.
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "model/config/preset.h"
#include "model/memory/continuum_memory.h"
#include "model/memory/memory_layer.h"
#include "model/memory/memory_rule.h"
#include "model/session/output_check.h"
#include "model/session/safetensors_writer.h"
#include "model/util/errors.h"

namespace memscope::app {

namespace {

struct TraceOptions {
  std::string preset;
  std::vector<std::string> sets;
  int64_t tokens = 64;
  int64_t heads = 2;
  int64_t dim = 32;
  uint64_t seed = 0;
  int64_t chunk = 0;  // 0: the sequential step
  bool parameters = false;  // also the layer's parameters and its input x: enough to rerun the whole layer
  std::string out;
  bool force = false;
};

void run_trace(const TraceOptions& o) {
  using namespace memscope::model;
  // Bad arguments are usage errors (exit 2, like CLI11's own), not failures of the run.
  auto usage = [](const std::string& what) { throw CLI::ValidationError("memory-trace: " + what); };
  if (o.tokens < 1) usage("--tokens must be at least 1");
  if (o.heads < 1) usage("--heads must be at least 1");
  if (o.dim < 1 || o.dim % o.heads != 0)
    usage("--dim " + std::to_string(o.dim) + " must be a positive multiple of --heads " + std::to_string(o.heads));
  if (o.chunk < 0) usage("--chunk must be at least 1");
  std::vector<std::filesystem::path> inputs;
  std::error_code ec;
  if (std::filesystem::is_regular_file(o.preset, ec)) inputs.emplace_back(o.preset);
  check_output({"--out", o.out, FileKind::MemoryTrace, 0}, inputs, o.force);
  const Preset preset = load_preset(o.preset, o.sets);
  const MemoryRule& rule = preset.memory;

  torch::manual_seed(o.seed);
  MemoryLayer layer(rule, MemoryLayerOptions{o.dim, o.heads, 0});
  const torch::Tensor x = torch::randn({1, o.tokens, o.dim});
  torch::NoGradGuard no_grad;
  MemoryState state = layer->initial_state(1);
  const MemoryState start = state.clone();
  ForwardOutput out = o.chunk > 0 ? layer->forward(x, state, o.chunk, /*record=*/true)
                                  : layer->forward_sequential(x, state, /*record=*/true);
  const ForwardTrace& trace = *out.trace;

  auto first = [](const torch::Tensor& t) { return t.select(0, 0).to(torch::kFloat32).contiguous(); };
  auto with_start = [&](const torch::Tensor& initial, const torch::Tensor& per_token) {
    return torch::cat({first(initial.unsqueeze(1)), first(per_token)}, 0);  // [T+1,H,…]
  };
  NamedTensors tensors{
      {"phi_k", first(trace.inputs.phi_k)}, {"phi_q", first(trace.inputs.phi_q)}, {"v", first(trace.inputs.v)},
      {"retain", first(trace.inputs.retain)}, {"lr", first(trace.inputs.lr)},
      {"momentum", first(trace.inputs.momentum)}, {"gamma", first(trace.gamma)},
  };
  const bool linear = rule.structure == Structure::Linear;
  for (size_t i = 0; i < state.memory.size(); ++i)
    tensors.emplace_back(state.names[i], with_start(start.memory[i], trace.memory[i]));
  for (size_t i = 0; i < state.memory.size(); ++i)
    tensors.emplace_back(linear ? std::string("S") : "S_" + state.names[i],
                         with_start(start.momentum[i], trace.momentum[i]));
  tensors.emplace_back("y", first(out.y));
  if (o.parameters) {
    tensors.emplace_back("x", first(x));
    for (const auto& item : layer->named_parameters()) tensors.emplace_back("param/" + item.key(), item.value().contiguous());
  }
  tensors.emplace_back("loss_before", first(trace.loss_before));
  tensors.emplace_back("loss_after", first(trace.loss_after));
  // Beyond the table, only where the recurrence cannot be recomputed without them:
  // Moneta's latent A (M = A/‖A‖_q^{q−2}) and Yaad's threshold δ_t.
  if (trace.latent.defined()) tensors.emplace_back("A", with_start(start.latent, trace.latent));
  if (rule.bias == Bias::Huber) tensors.emplace_back("delta", first(trace.inputs.delta));
  // dgd.per_feature: α_t and η_t per input feature [T,H,d_φ] (`retain`/`lr` hold their means).
  if (rule.dgd_per_feature) {
    tensors.emplace_back("retain_feature", first(trace.inputs.retain_feature));
    tensors.emplace_back("lr_feature", first(trace.inputs.lr_feature));
  }

  const std::map<std::string, std::string> metadata{
      {"rule", rule.to_json().dump()},
      {"form", o.chunk > 0 ? "chunkwise" : "sequential"},
      {"chunk", std::to_string(o.chunk > 0 ? o.chunk : 1)},
      {"tokens", std::to_string(o.tokens)},
      {"heads", std::to_string(o.heads)},
      {"dim", std::to_string(o.dim)},
      {"seed", std::to_string(o.seed)},
  };
  // HOPE presets (model.ffn = cms, model.block = hope): the CMS levels on the same input, their
  // weights before and after every token and the tokens where each level applied its update.
  if (preset.model.uses_cms()) {
    CmsOptions c;
    c.d_model = o.dim;
    c.periods = parse_cms_periods(preset.model.cms_periods, "model.cms.periods");
    c.variant = parse_cms_variant(preset.model.cms_variant, "model.cms.variant");
    c.max_lr = rule.max_lr;
    c.inner_clip = rule.inner_clip;
    ContinuumMemory cms(c);  // drawn after x, so the memory layer's tensors match a run without CMS
    CmsState cms_state = cms->initial_state(1);
    const CmsState cms_start = cms_state.clone();
    CmsTrace cms_trace;
    tensors.emplace_back("cms_y", first(cms->forward(x, cms_state, &cms_trace)));
    for (size_t l = 0; l < c.periods.size(); ++l) {
      const std::string level = "cms_level" + std::to_string(l) + "/";
      for (size_t i = 0; i < 2; ++i)
        tensors.emplace_back(level + (i == 0 ? "W1" : "W2"),
                             torch::cat({cms_start.levels[l].weights[i].select(0, 0), cms_trace.weights[l][i].select(0, 0)}, 0)
                                 .to(torch::kFloat32)
                                 .contiguous());
      tensors.emplace_back(level + "tick", cms_trace.tick[l].to(torch::kFloat32).contiguous());
    }
  }
  write_safetensors(o.out, tensors, metadata);
  std::cout << "memory-trace: " << rule.name << ", " << o.tokens << " tokens, " << tensors.size() << " tensors -> "
            << o.out << "\n";
}

}  // namespace

void register_memory_trace(CLI::App& app) {
  auto o = std::make_shared<TraceOptions>();
  auto* cmd = app.add_subcommand("memory-trace",
                                 "Run one memory layer on a seeded random input and write its full trace (safetensors)");
  cmd->add_option("--preset", o->preset, "Preset name (assets/presets/NAME.toml) or a .toml path")->required();
  cmd->add_option("--set,-s", o->sets, "Override a knob, KEY=VALUE (e.g. memory.window.c=8); repeatable");
  cmd->add_option("--tokens", o->tokens, "Number of tokens T")->capture_default_str();
  cmd->add_option("--heads", o->heads, "Number of heads H")->capture_default_str();
  cmd->add_option("--dim", o->dim, "Model width D (head dimension D/H)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed for the parameters and the input")->capture_default_str();
  cmd->add_flag("--parameters", o->parameters,
                "Also write the input x and the layer's parameters (param/NAME): enough to rerun the whole layer elsewhere");
  cmd->add_option("--chunk", o->chunk, "Use the chunkwise form with chunk size B (default: the sequential step)");
  cmd->add_option("--out", o->out, "Output file (.safetensors)")->required();
  cmd->add_flag("--force", o->force, "Overwrite a file of another kind (or the preset file)");
  cmd->callback([o] { run_trace(*o); });
}

}  // namespace memscope::app
