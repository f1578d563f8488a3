#include "model/probe/frame_json.h"

#include <cmath>

namespace memscope::model {

namespace {

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json weight_fields(const Frame& f, int l, int h, int w) {
  nlohmann::json out = nlohmann::json::object();
  for (int k = 0; k < kWeightMetricCount; ++k) {
    const auto m = static_cast<WeightMetric>(k);
    const float v = f.weight(l, h, w, m);
    out[to_string(m)] = m == WeightMetric::NonFinite ? nlohmann::json(static_cast<int>(v)) : number(v);
  }
  return out;
}

}  // namespace

nlohmann::json frame_to_json(const Frame& f) {
  nlohmann::json j;
  j["step"] = f.step;
  j["timeline"] = f.timeline;
  j["kind"] = to_string(f.kind);
  j["train_step"] = f.train_step;
  if (f.kind == FrameKind::Inspect) {
    j["sequence"] = f.sequence;
    j["token_index"] = f.token_index;
    j["token"] = f.token;
    j["target"] = f.target >= 0 ? nlohmann::json(f.target) : nlohmann::json(nullptr);
    j["predicted"] = f.predicted >= 0 ? nlohmann::json(f.predicted) : nlohmann::json(nullptr);
  }
  j["loss"] = number(f.loss);
  if (f.kind == FrameKind::Train) {
    j["acc"] = number(f.acc);
    j["grad_norm"] = number(f.grad_norm);
    j["lr"] = number(f.lr);
    if (!f.module_names.empty() && f.module_grad_norm.size() == f.module_names.size() &&
        f.module_update_ratio.size() == f.module_names.size()) {
      nlohmann::json grads = nlohmann::json::object(), updates = nlohmann::json::object();
      for (size_t i = 0; i < f.module_names.size(); ++i) {
        grads[f.module_names[i]] = number(f.module_grad_norm[i]);
        updates[f.module_names[i]] = number(f.module_update_ratio[i]);
      }
      j["module_grad_norm"] = std::move(grads);
      j["module_update_ratio"] = std::move(updates);
    }
  }
  j["tokens_per_s"] = number(f.tokens_per_s);
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < f.layers; ++l) {
    nlohmann::json heads = nlohmann::json::array();
    for (int h = 0; h < f.heads; ++h) {
      nlohmann::json head;
      head["head"] = h;
      for (int k = 0; k < kHeadMetricCount; ++k)
        head[to_string(static_cast<HeadMetric>(k))] = number(f.head(l, h, static_cast<HeadMetric>(k)));
      for (size_t w = 0; w < f.weights.size(); ++w) {
        nlohmann::json fields = weight_fields(f, l, h, static_cast<int>(w));
        if (w == 0) head.update(fields);
        else head[f.weights[w]] = fields;
      }
      heads.push_back(std::move(head));
    }
    layers.push_back({{"layer", l}, {"heads", std::move(heads)}});
  }
  j["layers"] = std::move(layers);
  // Per-feature retain and lr: per layer, one array of features per row (head).
  if (f.feature_dim > 0) {
    using Named = std::pair<const char*, const std::vector<float>*>;
    for (const Named& named : {Named{"retain_feature", &f.retain_feature}, Named{"lr_feature", &f.lr_feature}}) {
      const char* key = named.first;
      const std::vector<float>* values = named.second;
      nlohmann::json per_layer = nlohmann::json::array();
      const size_t rows = static_cast<size_t>(f.feature_rows), dim = static_cast<size_t>(f.feature_dim);
      for (size_t l = 0; l < values->size() / (rows * dim); ++l) {
        nlohmann::json per_row = nlohmann::json::array();
        for (size_t r = 0; r < rows; ++r)
          per_row.push_back(std::vector<float>(values->begin() + static_cast<std::ptrdiff_t>((l * rows + r) * dim),
                                               values->begin() + static_cast<std::ptrdiff_t>((l * rows + r + 1) * dim)));
        per_layer.push_back(std::move(per_row));
      }
      j[key] = std::move(per_layer);
    }
  }
  // HOPE (issue 8): per layer, each CMS level's state norm and update tick, and the
  // self-modifying memories' target errors and effective retention.
  const int hope_layers = f.cms_levels > 0 ? static_cast<int>(f.cms_norm.size()) / f.cms_levels
                                           : static_cast<int>(f.selfmod_error.size()) / 5;
  if (hope_layers > 0) {
    nlohmann::json hope = nlohmann::json::array();
    for (int l = 0; l < hope_layers; ++l) {
      nlohmann::json layer{{"layer", l}};
      if (f.cms_levels > 0) {
        nlohmann::json norm = nlohmann::json::array(), tick = nlohmann::json::array();
        for (int k = 0; k < f.cms_levels; ++k) {
          norm.push_back(number(f.cms_norm[static_cast<size_t>(l * f.cms_levels + k)]));
          tick.push_back(static_cast<int>(f.cms_tick[static_cast<size_t>(l * f.cms_levels + k)]));
        }
        layer["cms_norm"] = std::move(norm);
        layer["cms_tick"] = std::move(tick);
      }
      if (!f.selfmod_error.empty()) {
        nlohmann::json error = nlohmann::json::object();
        const char* names[] = {"k", "v", "eta", "alpha", "memory"};
        for (int m = 0; m < 5; ++m) error[names[m]] = number(f.selfmod_error[static_cast<size_t>(l * 5 + m)]);
        layer["target_error"] = std::move(error);
      }
      if (f.selfmod_grad.size() == static_cast<size_t>(hope_layers) * 5) {
        // The backward through the inner loop: ‖∂L/∂W_t‖ of each self-modifying memory.
        nlohmann::json grad = nlohmann::json::object();
        const char* names[] = {"k", "v", "eta", "alpha", "memory"};
        for (int m = 0; m < 5; ++m) grad[names[m]] = number(f.selfmod_grad[static_cast<size_t>(l * 5 + m)]);
        layer["grad_W"] = std::move(grad);
      }
      if (!f.selfmod_retention.empty()) {
        // The dgd preconditioner's eigenvalue range: the effective retention (SPEC §8).
        layer["retention_min"] = number(f.selfmod_retention[static_cast<size_t>(l * 2)]);
        layer["retention_max"] = number(f.selfmod_retention[static_cast<size_t>(l * 2 + 1)]);
      }
      hope.push_back(std::move(layer));
    }
    j["hope"] = std::move(hope);
  }
  return j;
}

nlohmann::json event_to_json(const Event& e) {
  nlohmann::json j;
  j["event"] = to_string(e.kind);
  j["step"] = e.step;
  j["timeline"] = e.timeline;
  j["message"] = e.message;
  if (e.layer >= 0) j["layer"] = e.layer;
  if (e.head >= 0) j["head"] = e.head;
  if (!e.tensor.empty()) j["tensor"] = e.tensor;
  if (std::isfinite(e.value)) j["value"] = e.value;
  if (e.order >= 0) j["order"] = e.order;
  return j;
}

bool event_from_json(const nlohmann::json& j, Event& out) {
  if (!j.is_object()) return false;
  auto text = [&](const char* key) { return j.contains(key) && j[key].is_string(); };
  auto integer = [&](const char* key) { return j.contains(key) && j[key].is_number_integer(); };
  if (!text("event") || !integer("step") || !integer("timeline") || !text("message")) return false;
  Event e;
  bool known = false;
  for (auto kind : {EventKind::Spike, EventKind::NonFinite, EventKind::NsError, EventKind::NormGrowth,
                    EventKind::Command, EventKind::Breakpoint, EventKind::Error, EventKind::Notice})
    if (j["event"].get<std::string>() == to_string(kind)) e.kind = kind, known = true;
  if (!known) return false;
  e.step = j["step"].get<int64_t>();
  const int64_t timeline = j["timeline"].get<int64_t>();
  if (timeline < 0 || timeline > (1 << 20)) return false;
  e.timeline = static_cast<int>(timeline);
  e.message = j["message"].get<std::string>();
  if (j.contains("layer")) {
    if (!integer("layer")) return false;
    e.layer = j["layer"].get<int>();
  }
  if (j.contains("head")) {
    if (!integer("head")) return false;
    e.head = j["head"].get<int>();
  }
  if (j.contains("tensor")) {
    if (!text("tensor")) return false;
    e.tensor = j["tensor"].get<std::string>();
  }
  if (j.contains("value")) {
    if (!j["value"].is_number()) return false;
    e.value = j["value"].get<double>();
  }
  if (j.contains("order")) {
    if (!integer("order") || j["order"].get<int64_t>() < 0) return false;
    e.order = j["order"].get<int64_t>();
  }
  out = std::move(e);
  return true;
}

}  // namespace memscope::model
