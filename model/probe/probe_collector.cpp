#include "model/probe/probe_collector.h"

#include <algorithm>
#include <cmath>

#ifdef MEMSCOPE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include "model/memory/newton_schulz.h"
#include "model/probe/matrix_metrics.h"

namespace memscope::model {

namespace {

// The host copy of everything measured: one transfer. On CUDA the copy goes to pinned memory
// without blocking the stream, and we wait once for it.
std::vector<float> to_host(const at::Tensor& flat) {
  at::Tensor values = flat.to(at::kFloat);
  if (values.is_cuda()) {
    at::Tensor host = at::empty(values.sizes(), at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
    host.copy_(values, /*non_blocking=*/true);
#ifdef MEMSCOPE_CUDA
    at::cuda::getCurrentCUDAStream().synchronize();
#endif
    values = host;
  }
  values = values.contiguous();
  return {values.data_ptr<float>(), values.data_ptr<float>() + values.numel()};
}

at::Tensor not_measured(int64_t heads, const at::TensorOptions& options) {
  return at::full({heads}, std::numeric_limits<double>::quiet_NaN(), options);
}

// 1 per head whose tensor [H,…] holds a NaN or Inf.
at::Tensor nonfinite_per_head(const at::Tensor& t) {
  return at::logical_not(at::isfinite(t)).flatten(1).any(1).to(t.scalar_type());
}

}  // namespace

at::Tensor downsample_matrix(const at::Tensor& m, int64_t largest) {
  const int64_t a = m.size(-2), b = m.size(-1);
  if (largest <= 0 || std::max(a, b) <= largest) return m;
  const double factor = static_cast<double>(std::max(a, b)) / static_cast<double>(largest);
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(a) / factor)));
  const int64_t cols = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(b) / factor)));
  return at::adaptive_avg_pool2d(m.unsqueeze(0), {std::min(rows, largest), std::min(cols, largest)}).squeeze(0);
}

std::vector<double> collect_probes(Frame& frame, const ProbeInputs& in, const ProbeConfig& config) {
  at::NoGradGuard no_grad;
  const LanguageModel& model = *in.model;
  const MemoryRule& rule = model->rule();
  frame.layers = 0;
  frame.heads = 0;
  frame.weights.clear();
  frame.head_metrics.clear();
  frame.weight_metrics.clear();
  frame.matrices.clear();

  std::vector<at::Tensor> rows;  // each [H]: per layer, kHeadMetricCount head rows, then per weight kWeightMetricCount
  std::vector<at::Tensor> matrices;
  struct Pending {
    MatrixSnapshot snapshot;
    int64_t numel;
  };
  std::vector<Pending> pending;
  const bool has_memory = model->config().has_memory() && !in.state->blocks.empty();
  const int64_t layers = has_memory ? model->layers() : 0;
  int64_t heads = 0;

  for (int64_t l = 0; l < layers; ++l) {
    const MemoryState& ms = in.state->blocks[static_cast<size_t>(l)].memory;
    heads = ms.memory.front().size(1);
    const auto options = ms.memory.front().options();
    if (l == 0) frame.weights = ms.names;

    // Head metrics: the gates and surprise of this token (SPEC §8), row 0 of the batch.
    const StepRecord* rec = nullptr;
    if (in.records && static_cast<size_t>(l) < in.records->size() && (*in.records)[static_cast<size_t>(l)])
      rec = &*(*in.records)[static_cast<size_t>(l)];
    at::Tensor record_nonfinite = at::zeros({heads}, options);
    if (rec) {
      const at::Tensor retain = rule.retention == Retention::None ? at::ones({heads}, options) : rec->retain[0].to(options);
      const at::Tensor lr = rec->lr[0].to(options);
      at::Tensor lo = retain, hi = retain;
      if (rule.optimiser == Optimiser::Dgd) {
        // (αI − ηφφᵀ) has eigenvalue α − η‖φ‖² along φ and α on φ's complement.
        const at::Tensor along = retain - lr * rec->phi_k[0].to(options).pow(2).sum(-1);
        lo = at::minimum(retain, along);
        hi = at::maximum(retain, along);
      }
      const at::Tensor before = rec->loss_before[0].to(options), after = rec->loss_after[0].to(options);
      const std::vector<at::Tensor> head_rows{retain, lr, rec->momentum[0].to(options), rec->token_gamma[0].to(options),
                                              lo, hi, before, after, before - after};
      for (const auto& r : head_rows) rows.push_back(r);
      record_nonfinite = nonfinite_per_head(at::stack(head_rows, 1));
    } else {
      for (int k = 0; k < kHeadMetricCount; ++k) rows.push_back(not_measured(heads, options));
    }

    for (size_t w = 0; w < ms.memory.size(); ++w) {
      const at::Tensor m = ms.memory[w][0];    // [H,a,b]
      const at::Tensor s = ms.momentum[w][0];  // [H,a,b]
      const at::Tensor bad_m = nonfinite_per_head(m), bad_s = nonfinite_per_head(s);
      // SVDs fail on NaN input: measure a zeroed copy and report NaN for the broken heads.
      auto finite = [](const at::Tensor& t) { return at::nan_to_num(t, 0.0, 0.0, 0.0); };
      auto mask = [&](const at::Tensor& value, const at::Tensor& bad) {
        return at::where(bad > 0, at::full_like(value, std::numeric_limits<double>::quiet_NaN()), value);
      };
      rows.push_back(at::linalg_vector_norm(m, 2, {-2, -1}, false));
      rows.push_back(at::linalg_vector_norm(s, 2, {-2, -1}, false));
      at::Tensor dm;
      if (in.memory_before && static_cast<size_t>(l) < in.memory_before->size()) {
        dm = m - (*in.memory_before)[static_cast<size_t>(l)][w][0];
        rows.push_back(at::linalg_vector_norm(dm, 2, {-2, -1}, false));
      } else {
        rows.push_back(not_measured(heads, options));
      }
      rows.push_back(mask(effective_rank(finite(m)), bad_m));
      if (rule.optimiser == Optimiser::Muon) {
        const at::Tensor u = rec && w < rec->ns_output.size() ? rec->ns_output[w][0] : newton_schulz(finite(s), rule.ns);
        const OrthogonalityError e = orthogonality_error(finite(u));
        const at::Tensor bad_u = at::maximum(bad_s, nonfinite_per_head(u));
        rows.push_back(mask(e.error, bad_u));
        rows.push_back(mask(e.sigma_min, bad_u));
        rows.push_back(mask(e.sigma_max, bad_u));
      } else {
        for (int k = 0; k < 3; ++k) rows.push_back(not_measured(heads, options));
      }
      rows.push_back(bad_m + 2 * bad_s + 4 * record_nonfinite);

      if (in.matrices) {
        const int64_t largest = config.full_matrices ? 0 : config.downsample;
        const std::vector<std::pair<const char*, at::Tensor>> shown{{"M", m}, {"S", s}, {"dM", dm}};
        for (const auto& [name, t] : shown) {
          if (!t.defined()) continue;
          const at::Tensor small = downsample_matrix(t, largest);
          for (int64_t h = 0; h < heads; ++h) {
            MatrixSnapshot snap;
            snap.layer = static_cast<int>(l);
            snap.head = static_cast<int>(h);
            snap.weight = ms.names[w];
            snap.tensor = name;
            snap.rows = static_cast<int>(small.size(-2));
            snap.cols = static_cast<int>(small.size(-1));
            snap.full_rows = static_cast<int>(t.size(-2));
            snap.full_cols = static_cast<int>(t.size(-1));
            pending.push_back({std::move(snap), small.size(-2) * small.size(-1)});
          }
          matrices.push_back(small.flatten());
        }
      }
    }
  }

  // One transfer: scalar rows, then matrices, then the caller's extras.
  std::vector<at::Tensor> parts;
  for (const auto& r : rows) parts.push_back(r.to(at::kFloat).flatten());
  for (const auto& m : matrices) parts.push_back(m.to(at::kFloat));
  for (const auto& e : in.extra) parts.push_back(e.detach().to(at::kFloat).reshape({1}));
  std::vector<float> host;
  if (!parts.empty()) {
    at::Tensor flat = at::cat(parts);
    host = to_host(flat);
  }

  frame.layers = static_cast<int>(layers);
  frame.heads = static_cast<int>(heads);
  const size_t W = frame.weights.size();
  frame.head_metrics.assign(static_cast<size_t>(layers * heads) * kHeadMetricCount, 0.0f);
  frame.weight_metrics.assign(static_cast<size_t>(layers * heads) * W * kWeightMetricCount, 0.0f);
  size_t at = 0;
  for (int64_t l = 0; l < layers; ++l) {
    for (int k = 0; k < kHeadMetricCount; ++k, at += static_cast<size_t>(heads))
      for (int64_t h = 0; h < heads; ++h)
        frame.head_metrics[static_cast<size_t>(l * heads + h) * kHeadMetricCount + k] = host[at + h];
    for (size_t w = 0; w < W; ++w)
      for (int k = 0; k < kWeightMetricCount; ++k, at += static_cast<size_t>(heads))
        for (int64_t h = 0; h < heads; ++h)
          frame.weight_metrics[(static_cast<size_t>(l * heads + h) * W + w) * kWeightMetricCount + k] = host[at + h];
  }
  for (auto& p : pending) {
    p.snapshot.values.assign(host.begin() + static_cast<std::ptrdiff_t>(at),
                             host.begin() + static_cast<std::ptrdiff_t>(at + p.numel));
    at += static_cast<size_t>(p.numel);
    frame.matrices.push_back(std::move(p.snapshot));
  }
  std::vector<double> extras;
  for (size_t i = 0; i < in.extra.size(); ++i) extras.push_back(host[at + i]);
  return extras;
}

}  // namespace memscope::model
