#include "model/memory/memory_rule.h"

#include <nlohmann/json.hpp>

#include "model/util/errors.h"

namespace memscope::model {

const char* to_string(Structure v) { return v == Structure::Linear ? "linear" : "mlp"; }

const char* to_string(Bias v) {
  switch (v) {
    case Bias::L2: return "l2";
    case Bias::Lp: return "lp";
    case Bias::Huber: return "huber";
    case Bias::Dot: return "dot";
  }
  return "?";
}

const char* to_string(Retention v) {
  switch (v) {
    case Retention::L2Decay: return "l2-decay";
    case Retention::None: return "none";
    case Retention::LqNormalize: return "lq-normalize";
    case Retention::Softmax: return "softmax";
  }
  return "?";
}

const char* to_string(Optimiser v) {
  switch (v) {
    case Optimiser::GdMomentum: return "gd-momentum";
    case Optimiser::Muon: return "muon";
    case Optimiser::Dgd: return "dgd";
  }
  return "?";
}

const char* to_string(WindowWeights v) {
  switch (v) {
    case WindowWeights::Uniform: return "uniform";
    case WindowWeights::Decay: return "decay";
    case WindowWeights::Gated: return "gated";
  }
  return "?";
}

const char* to_string(FeatureMapKind v) {
  switch (v) {
    case FeatureMapKind::Identity: return "identity";
    case FeatureMapKind::Poly: return "poly";
    case FeatureMapKind::Tensor2: return "tensor2";
  }
  return "?";
}

const char* to_string(ResetPolicy v) {
  switch (v) {
    case ResetPolicy::Sequence: return "sequence";
    case ResetPolicy::Batch: return "batch";
    case ResetPolicy::Never: return "never";
  }
  return "?";
}

const char* to_string(ReadOrder v) { return v == ReadOrder::AfterWrite ? "after-write" : "before-write"; }

namespace {

[[noreturn]] void bad(const std::string& rule, const std::string& key, const std::string& why) {
  throw UserError("memory rule '" + rule + "': " + key + ": " + why);
}

}  // namespace

void MemoryRule::validate() const {
  if (window < 1) bad(name, "memory.window.c", "must be at least 1, got " + std::to_string(window));
  if (!(gamma_decay > 0.0 && gamma_decay <= 1.0))
    bad(name, "memory.window.decay", "must lie in (0, 1], got " + std::to_string(gamma_decay));
  if (feature_map == FeatureMapKind::Poly && (poly_degree < 1 || poly_degree > 8))
    bad(name, "memory.feature_map.degree", "must lie in 1..8, got " + std::to_string(poly_degree));
  if (ns.iterations() < 1 || ns.iterations() > 20)
    bad(name, ns.per_step.empty() ? "memory.ns.steps" : "memory.ns.per_step",
        "needs 1..20 iterations, got " + std::to_string(ns.iterations()));
  if (!(max_lr > 0.0)) bad(name, "memory.lr.max", "must be > 0, got " + std::to_string(max_lr));
  if (!(lp_p >= 1.0)) bad(name, "memory.lp.p", "must be >= 1, got " + std::to_string(lp_p));
  if (!(lq_q > 2.0)) bad(name, "memory.lq.q", "must be > 2, got " + std::to_string(lq_q));
  if (!(huber_delta > 0.0))
    bad(name, "memory.huber.delta", "must be > 0, got " + std::to_string(huber_delta));
  if (!(inner_clip >= 0.0)) bad(name, "memory.inner.clip", "must be >= 0, got " + std::to_string(inner_clip));
  if (dgd_per_feature && optimiser != Optimiser::Dgd)
    bad(name, "memory.dgd.per_feature", std::string("needs memory.optimiser = dgd, got ") + to_string(optimiser));
  // The per-feature retention scales M's columns; the nonlinear retentions act on whole rows or norms.
  if (dgd_per_feature && retention != Retention::L2Decay && retention != Retention::None)
    bad(name, "memory.dgd.per_feature",
        std::string("needs memory.retention = l2-decay or none, got ") + to_string(retention));
  if (train_chunk < 1) bad(name, "train.chunk", "must be at least 1, got " + std::to_string(train_chunk));
  if (structure == Structure::Mlp) {
    // SPEC §3: the residual form z + LN(…) needs d_v = d_φ.
    if (feature_map == FeatureMapKind::Tensor2)
      bad(name, "memory.structure",
          "mlp needs d_v = d_phi, but memory.feature_map.kind = tensor2 makes d_phi = d + d^2");
    // log M (softmax) and the q-norm latent are defined for the single matrix of linear memory.
    if (retention == Retention::LqNormalize || retention == Retention::Softmax)
      bad(name, "memory.retention",
          std::string(to_string(retention)) + " needs memory.structure = linear, got mlp");
  }
}

int64_t MemoryRule::feature_dim(int64_t key_dim) const {
  return feature_map == FeatureMapKind::Tensor2 ? key_dim + key_dim * key_dim : key_dim;
}

nlohmann::json MemoryRule::to_json() const {
  nlohmann::json coefficients = nlohmann::json::array();
  for (double c : ns.coefficients) coefficients.push_back(c);
  nlohmann::json per_step = nlohmann::json::array();
  for (const auto& triple : ns.per_step) per_step.push_back({triple[0], triple[1], triple[2]});
  return {
      {"name", name},
      {"description", description},
      {"memory",
       {{"structure", to_string(structure)},
        {"bias", to_string(bias)},
        {"retention", to_string(retention)},
        {"optimiser", to_string(optimiser)},
        {"read", to_string(read)},
        {"reset", to_string(reset)},
        {"conv", conv},
        {"window", {{"c", window}, {"gamma", to_string(gamma)}, {"decay", gamma_decay}}},
        {"feature_map",
         {{"kind", to_string(feature_map)}, {"degree", poly_degree}, {"learnable", poly_learnable}}},
        {"ns", {{"steps", ns.steps}, {"coefficients", coefficients}, {"per_step", per_step}}},
        {"lr", {{"max", max_lr}}},
        {"momentum", {{"enabled", momentum_enabled}}},
        {"lp", {{"p", lp_p}}},
        {"lq", {{"q", lq_q}}},
        {"huber", {{"delta", huber_delta}}},
        {"dgd", {{"per_feature", dgd_per_feature}}},
        {"inner", {{"normalize", inner_normalize}, {"clip", inner_clip}}}}},
      {"train", {{"chunk", train_chunk}}},
  };
}

}  // namespace memscope::model
