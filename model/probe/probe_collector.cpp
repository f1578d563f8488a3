#include "model/probe/probe_collector.h"


#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#ifdef MEMSCOPE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "model/memory/attentional_bias.h"
#include "model/memory/newton_schulz.h"
#include "model/probe/fused_probes.h"
#include "model/probe/hope_probes.h"
#include "model/probe/matrix_metrics.h"
#include "model/probe/selfmod_snapshot.h"
#include "model/probe/shown_matrices.h"
#include "model/probe/small_singular_values.h"

namespace memscope::model {

namespace {

// The host copy of everything measured: one transfer. On CUDA it goes to pinned memory,
// asynchronously, on a side stream that starts after the compute stream's work so far; the host
// then waits for that copy alone, not for what is queued on the compute stream behind it. `values`
// outlives the wait, so the caching allocator cannot give its memory to the compute stream mid-copy.
std::vector<float> to_host(const at::Tensor& flat) {
  at::Tensor values = flat.to(at::kFloat);
  if (values.is_cuda()) {
    at::Tensor host = at::empty(values.sizes(), at::TensorOptions().dtype(at::kFloat).pinned_memory(true));
#ifdef MEMSCOPE_CUDA
    const c10::DeviceIndex device = values.device().index();
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device);
    const c10::cuda::CUDAStream copier = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device);
    at::cuda::CUDAEvent measured;
    measured.record(compute);
    measured.block(copier);
    {
      c10::cuda::CUDAStreamGuard on_copier(copier);
      host.copy_(values, /*non_blocking=*/true);
    }
    at::cuda::CUDAEvent copied;
    copied.record(copier);
    copied.synchronize();
#else
    host.copy_(values);  // not reached: a build without CUDA has no CUDA tensors
#endif
    values = host;
  }
  values = values.contiguous();
  return {values.data_ptr<float>(), values.data_ptr<float>() + values.numel()};
}

}  // namespace

std::vector<double> collect_probes(Frame& frame, const ProbeInputs& in, const ProbeConfig& config) {
  return fused_probes_apply(in, config) ? collect_fused_probes(frame, in)
                                        : collect_probes_general(frame, in, config);
}

std::vector<double> collect_probes_general(Frame& frame, const ProbeInputs& in, const ProbeConfig& config) {
  at::NoGradGuard no_grad;
  const LanguageModel& model = *in.model;
  const MemoryRule& rule = model->rule();
  frame.layers = 0;
  frame.heads = 0;
  frame.weights.clear();
  frame.head_metrics.clear();
  frame.weight_metrics.clear();
  frame.matrices.clear();

  const bool has_memory = model->config().has_memory() && !in.state->blocks.empty();
  const int64_t layers = has_memory ? model->layers() : 0;
  std::vector<at::Tensor> parts;  // everything for the host, flattened, in frame layout
  struct Pending {
    MatrixSnapshot snapshot;
    int64_t numel;
  };
  std::vector<Pending> pending;
  // One snapshot to come: `small` [·, r, c] is what it shows of `full` [·, R, C].
  auto add_pending = [&pending](int64_t layer, int64_t head, const std::string& weight, const char* tensor,
                                const at::Tensor& small, int64_t full_rows, int64_t full_cols) {
    MatrixSnapshot snap;
    snap.layer = static_cast<int>(layer);
    snap.head = static_cast<int>(head);
    snap.weight = weight;
    snap.tensor = tensor;
    snap.rows = static_cast<int>(small.size(-2));
    snap.cols = static_cast<int>(small.size(-1));
    snap.full_rows = static_cast<int>(full_rows);
    snap.full_cols = static_cast<int>(full_cols);
    pending.push_back({std::move(snap), small.size(-2) * small.size(-1)});
  };
  // When a matrix is shown shrunk, its full spectrum and range go to the host too
  // (MatrixSnapshot::singular_values, full_min …), in `pending`'s order, at matrices_every cadence.
  std::vector<at::Tensor> spectra;
  int64_t heads = 0;

  if (layers > 0) {
    // Every layer has the same memory shapes: stack them to [L,H,…] so that each metric is one
    // batched op (one SVD per weight for erank and NS error together) rather than one per layer.
    const MemoryState& first = in.state->blocks.front().memory;
    heads = first.memory.front().size(1);
    frame.weights = first.names;
    const auto options = first.memory.front().options();
    auto stacked = [&](const std::function<at::Tensor(int64_t)>& of_layer) {
      std::vector<at::Tensor> per_layer;
      for (int64_t l = 0; l < layers; ++l) per_layer.push_back(of_layer(l));
      return at::stack(per_layer);
    };
    auto state_of = [&](int64_t l) -> const MemoryState& { return in.state->blocks[static_cast<size_t>(l)].memory; };
    auto record_of = [&](int64_t l) -> const StepRecord* {
      if (!in.records || static_cast<size_t>(l) >= in.records->size() || !(*in.records)[static_cast<size_t>(l)])
        return nullptr;
      return &*(*in.records)[static_cast<size_t>(l)];
    };
    bool all_records = in.records != nullptr;
    for (int64_t l = 0; l < layers; ++l) all_records = all_records && record_of(l);
    const auto nan = std::numeric_limits<double>::quiet_NaN();
    auto nonfinite = [](const at::Tensor& t) {  // [L,H,…] → [L,H] 1 where any NaN/Inf
      return at::logical_not(at::isfinite(t)).flatten(2).any(2).to(t.scalar_type());
    };

    // Head metrics [L,H,kHeadMetricCount]: the gates and surprise of this token (SPEC §8).
    at::Tensor head_bad = at::zeros({layers, heads}, options);
    at::Tensor head_metrics;
    if (all_records) {
      // One stack per layer of what the step recorded, then one across layers: [L,H,6].
      const at::Tensor recorded = stacked([&](int64_t l) {
        const StepRecord& r = *record_of(l);
        return at::stack({r.retain, r.lr, r.momentum, r.token_gamma, r.loss_before, r.loss_after}, -1).select(0, 0);
      }).to(options);
      const auto column = [&](int i) { return recorded.select(-1, i); };
      const at::Tensor lr = column(1);
      const at::Tensor retain = rule.retention == Retention::None ? at::ones_like(lr) : column(0);
      at::Tensor lo = retain, hi = retain;
      if (rule.optimiser == Optimiser::Dgd && rule.structure == Structure::Mlp) {
        // MLP memory: the diagonal preconditioner α − η⊙k̄² (SPEC §5); its entries are its eigenvalues.
        const at::Tensor p = stacked([&](int64_t l) {
          const StepRecord& r = *record_of(l);
          const at::Tensor& k_sq = r.key_squares;
          const at::Tensor a = rule.dgd_per_feature ? r.retain_feature : r.retain.unsqueeze(-1);
          const at::Tensor e = rule.dgd_per_feature ? r.lr_feature : r.lr.unsqueeze(-1);
          return (a - e * k_sq).select(0, 0);
        }).to(options);
        lo = std::get<0>(p.min(-1));
        hi = std::get<0>(p.max(-1));
      } else if (rule.optimiser == Optimiser::Dgd && rule.dgd_per_feature) {
        // M_{t−1}(diag α − φ (wη⊙φ)ᵀ), w the token's own window weight: with u = √(wη)⊙φ the map
        // is similar to the symmetric diag α − u uᵀ, so its eigenvalues are real (eigvalsh).
        const at::Tensor map = stacked([&](int64_t l) {
          const StepRecord& r = *record_of(l);
          const at::Tensor w = r.gamma.select(-1, -1).unsqueeze(-1) * inner_loss_scale(rule, r.v.size(-1));
          const at::Tensor u = (r.lr_feature * w).sqrt() * r.phi_k;
          return (at::diag_embed(r.retain_feature) - u.unsqueeze(-1) * u.unsqueeze(-2)).select(0, 0);
        });
        const at::Tensor eig = at::linalg_eigvalsh(map.to(at::kDouble)).to(options);
        lo = eig.select(-1, 0);
        hi = eig.select(-1, -1);
      } else if (rule.optimiser == Optimiser::Dgd) {
        // (αI − wηφφᵀ) has eigenvalue α − wη‖φ‖² along φ and α on φ's complement; w is the
        // token's own window weight times the inner loss's scale (1/d_v with memory.inner.normalize).
        const at::Tensor phi_sq = stacked([&](int64_t l) {
          const StepRecord& r = *record_of(l);
          return (r.phi_k.pow(2).sum(-1) * r.gamma.select(-1, -1) * inner_loss_scale(rule, r.v.size(-1))).select(0, 0);
        });
        const at::Tensor along = retain - lr * phi_sq.to(options);
        lo = at::minimum(retain, along);
        hi = at::maximum(retain, along);
      }
      const at::Tensor before = column(4), after = column(5);
      head_metrics = at::stack({retain, lr, column(2), column(3), lo, hi, before, after, before - after}, -1);
      head_bad = nonfinite(head_metrics.unsqueeze(-1));
    } else {
      head_metrics = at::full({layers, heads, kHeadMetricCount}, nan, options);
    }
    parts.push_back(head_metrics.to(at::kFloat).flatten());

    // Weight metrics [L,H,W,kWeightMetricCount].
    std::vector<at::Tensor> per_weight;
    std::vector<at::Tensor> shown;  // matrices, in snapshot order
    for (size_t w = 0; w < frame.weights.size(); ++w) {
      const at::Tensor m = stacked([&](int64_t l) { return state_of(l).memory[w].select(0, 0); });    // [L,H,a,b]
      const at::Tensor s = stacked([&](int64_t l) { return state_of(l).momentum[w].select(0, 0); });  // [L,H,a,b]
      const at::Tensor bad_m = nonfinite(m), bad_s = nonfinite(s);
      // SVDs fail on NaN input: measure zeroed copies and report NaN for the broken heads.
      auto finite = [](const at::Tensor& t) { return at::nan_to_num(t, 0.0, 0.0, 0.0); };
      auto mask = [&](const at::Tensor& value, const at::Tensor& bad) {
        return at::where(bad > 0, at::full_like(value, nan), value);
      };
      const at::Tensor none = at::full({layers, heads}, nan, options);
      at::Tensor dm, norm_dm = none;
      if (in.memory_before && static_cast<int64_t>(in.memory_before->size()) == layers) {
        dm = m - stacked([&](int64_t l) { return (*in.memory_before)[static_cast<size_t>(l)][w].select(0, 0); });
        norm_dm = at::linalg_vector_norm(dm, 2, {-2, -1}, false);
      }
      const bool muon = rule.optimiser == Optimiser::Muon;
      at::Tensor u, bad_u;
      if (muon) {
        u = all_records && w < record_of(0)->ns_output.size()
                ? stacked([&](int64_t l) { return record_of(l)->ns_output[w].select(0, 0); })
                : newton_schulz(finite(s), rule.ns);
        bad_u = at::maximum(bad_s, nonfinite(u));
      }
      // One batched SVD, [·,a,b] flattened to a stack: small float matrices on the CPU take the
      // SIMD lanes of small_singular_values (LAPACK otherwise).
      const at::Tensor spectra_of = muon ? at::cat({finite(m), finite(u)}) : finite(m);
      const at::Tensor sigma = small_singular_values(spectra_of.flatten(0, -3)).unflatten(0, spectra_of.sizes().slice(0, spectra_of.dim() - 2));
      const at::Tensor erank = mask(effective_rank_from_singular_values(sigma.narrow(0, 0, layers)), bad_m);
      at::Tensor ns_error = none, ns_min = none, ns_max = none;
      if (muon) {
        const OrthogonalityError e = orthogonality_error_from_singular_values(sigma.narrow(0, layers, layers));
        ns_error = mask(e.error, bad_u);
        ns_min = mask(e.sigma_min, bad_u);
        ns_max = mask(e.sigma_max, bad_u);
      }
      per_weight.push_back(at::stack({at::linalg_vector_norm(m, 2, {-2, -1}, false),
                                      at::linalg_vector_norm(s, 2, {-2, -1}, false), norm_dm, erank, ns_error, ns_min,
                                      ns_max, bad_m + 2 * bad_s + 4 * head_bad, none, none, none},  // grad_*: inner_backward
                                     -1));  // [L,H,K]

      if (in.matrices) {
        const int64_t largest = config.full_matrices ? 0 : config.downsample;
        const std::vector<std::pair<const char*, at::Tensor>> kinds{{"M", m}, {"S", s}, {"dM", dm}};
        for (const auto& [name, t] : kinds) {
          if (!t.defined()) continue;
          // M's singular values are the erank SVD's above.
          const ShownMatrices view = show_matrices(
              t.flatten(0, 1), largest,
              std::string(name) == "M" ? sigma.narrow(0, 0, layers).flatten(0, 1) : at::Tensor());
          const at::Tensor& small = view.shown;  // [L·H, r, c]
          shown.push_back(small.flatten());
          if (view.summary.defined()) spectra.push_back(view.summary.flatten());
          for (int64_t l = 0; l < layers; ++l)
            for (int64_t h = 0; h < heads; ++h)
              add_pending(l, h, frame.weights[w], name, small, t.size(-2), t.size(-1));
        }
      }
    }
    parts.push_back(at::stack(per_weight, 2).to(at::kFloat).flatten());  // [L,H,W,K]
    for (auto& m : shown) parts.push_back(m.to(at::kFloat));
  }
  if (in.matrices && model->config().block == BlockKind::Hope) {
    // The self-modifying memories as heads: per weight and tensor, [L·5, r', c'] shown copies.
    const int64_t largest = config.full_matrices ? 0 : config.downsample;
    for (const SelfModShown& s : show_selfmod_memories(*in.state, in.memory_before, largest)) {
      parts.push_back(s.view.shown.to(at::kFloat).flatten());
      if (s.view.summary.defined()) spectra.push_back(s.view.summary.flatten());
      for (size_t l = 0; l < in.state->blocks.size(); ++l)
        for (int m = 0; m < kSelfModCount; ++m)
          add_pending(static_cast<int64_t>(l), m, s.weight == 0 ? "W1" : "W2", s.tensor, s.view.shown,
                      s.full_rows, s.full_cols);
    }
  }
  const at::Tensor hope = hope_probe_tensor(model, *in.state, in.records);
  if (hope.defined()) parts.push_back(hope);
  for (const auto& e : in.extra) parts.push_back(e.detach().to(at::kFloat).reshape({1}));
  for (auto& s : spectra) parts.push_back(std::move(s));

  // One transfer for the whole frame.
  const std::vector<float> host = parts.empty() ? std::vector<float>{} : to_host(at::cat(parts));
  frame.layers = static_cast<int>(layers);
  frame.heads = static_cast<int>(heads);
  const size_t head_count = static_cast<size_t>(layers * heads) * kHeadMetricCount;
  const size_t weight_count = static_cast<size_t>(layers * heads) * frame.weights.size() * kWeightMetricCount;
  size_t at = 0;
  frame.head_metrics.assign(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(head_count));
  at += head_count;
  frame.weight_metrics.assign(host.begin() + static_cast<std::ptrdiff_t>(at),
                              host.begin() + static_cast<std::ptrdiff_t>(at + weight_count));
  at += weight_count;
  // Snapshots come per weight, tensor, layer, head, matching `pending`. Their buffers are the
  // engine's, made ahead where it has some (snapshot_buffers.h): a HOPE snapshot frame's 40 shown
  // matrices and spectra, 170 KB, faulted in page by page on the probes' thread otherwise.
  auto buffer = [&](size_t n) { return snapshot_buffer(in.snapshot_buffers, n); };
  for (auto& p : pending) {
    p.snapshot.values = buffer(static_cast<size_t>(p.numel));
    std::copy(host.begin() + static_cast<std::ptrdiff_t>(at),
              host.begin() + static_cast<std::ptrdiff_t>(at + p.numel), p.snapshot.values.begin());
    at += static_cast<size_t>(p.numel);
    frame.matrices.push_back(std::move(p.snapshot));
  }
  at += unpack_hope_probes(frame, model, *in.state, in.records, host.data() + at);
  std::vector<double> extras;
  for (size_t i = 0; i < in.extra.size(); ++i) extras.push_back(host[at + i]);
  at += in.extra.size();
  // The full matrices' spectra, in `pending`'s order (after the extras, so their places stay put).
  for (MatrixSnapshot& m : frame.matrices) {
    if (m.rows == m.full_rows && m.cols == m.full_cols) continue;
    const auto n = static_cast<size_t>(std::min(m.full_rows, m.full_cols));
    m.singular_values = buffer(n);
    std::copy(host.begin() + static_cast<std::ptrdiff_t>(at),
              host.begin() + static_cast<std::ptrdiff_t>(at + n), m.singular_values.begin());
    at += n;
    m.full_min = host[at];
    m.full_max = host[at + 1];
    m.full_nan = static_cast<int64_t>(host[at + 2]);
    m.full_inf = static_cast<int64_t>(host[at + 3]);
    at += 4;
  }
  if (in.matrices && in.snapshot_buffers) in.snapshot_buffers->frame_done();
  return extras;
}

}  // namespace memscope::model
