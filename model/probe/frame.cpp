#include "model/probe/frame.h"

namespace memscope::model {

const char* to_string(HeadMetric m) {
  static constexpr std::array<const char*, kHeadMetricCount> names{
      "retain", "lr", "momentum", "gamma", "retain_min", "retain_max", "surprise_before", "surprise_after", "gain"};
  return names.at(static_cast<size_t>(m));
}

const char* to_string(WeightMetric m) {
  static constexpr std::array<const char*, kWeightMetricCount> names{
      "norm_M", "norm_S", "norm_dM", "erank", "ns_error", "ns_smin", "ns_smax", "nonfinite",
      "grad_M",  "grad_S", "grad_ns"};
  return names.at(static_cast<size_t>(m));
}

const char* to_string(FrameKind kind) { return kind == FrameKind::Train ? "train" : "inspect"; }

int64_t Frame::bytes() const {
  int64_t total = static_cast<int64_t>(sizeof(Frame) + (head_metrics.size() + weight_metrics.size() + cms_norm.size() +
                                                         cms_tick.size() + selfmod_error.size() + selfmod_retention.size() + selfmod_grad.size() +
                                                         retain_feature.size() + lr_feature.size() +
                                                         module_grad_norm.size() + module_update_ratio.size() +
                                                         batch_loss.size()) *
                                                            sizeof(float) +
                                                        (batch_tokens.size() + batch_targets.size()) * sizeof(int64_t));
  for (const auto& name : module_names) total += static_cast<int64_t>(sizeof(std::string) + name.size());
  for (const auto& m : matrices) total += static_cast<int64_t>(sizeof(MatrixSnapshot) + m.values.size() * sizeof(float));
  return total;
}

}  // namespace memscope::model
