#include "model/probe/fused_probes.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/memory/attentional_bias.h"
#include "model/memory/newton_schulz.h"
#include "model/probe/finite_copy.h"
#include "model/probe/hope_probes.h"
#include "model/probe/small_singular_values.h"
#include "model/util/sum_of_squares.h"

namespace memscope::model {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ‖x − y‖_F (y = nullptr: ‖x‖_F).
float frobenius(const float* x, const float* y, int64_t n) {
  return static_cast<float>(std::sqrt(y ? squares_of_difference(x, y, n) : squares_of(x, n)));
}

// The probes read batch row 0 of a [B,H,…] float tensor.
const float* row0(const at::Tensor& t) { return t.data_ptr<float>(); }

}  // namespace

bool fused_probes_apply(const ProbeInputs& in, const ProbeConfig& config) {
  const LanguageModel& model = *in.model;
  if (!model->config().has_memory() || in.state->blocks.empty() || model->config().block == BlockKind::Hope ||
      model->config().uses_cms())
    return false;
  const MemoryRule& rule = model->rule();
  // dgd on an MLP memory has a per-feature preconditioner for its retention range (the general
  // path's key_squares branch), and per-feature dgd an eigenvalue problem: both stay general.
  if (rule.dgd_per_feature || (rule.structure == Structure::Mlp && rule.optimiser == Optimiser::Dgd)) return false;
  if (rule.structure != Structure::Linear && rule.structure != Structure::Mlp) return false;
  const size_t weights = in.state->blocks.front().memory.memory.size();
  int64_t largest_side = 0;
  for (const auto& block : in.state->blocks) {
    const MemoryState& s = block.memory;
    if (s.memory.empty() || s.memory.size() != weights || s.momentum.size() != weights) return false;
    for (size_t w = 0; w < weights; ++w)
      for (const at::Tensor* t : {&s.memory[w], &s.momentum[w]}) {
        if (!t->defined() || t->dim() != 4 || !t->device().is_cpu() || t->scalar_type() != at::kFloat) return false;
        largest_side = std::max({largest_side, t->size(-2), t->size(-1)});
      }
  }
  if (in.records)
    for (const auto& r : *in.records)
      if (r && (r->loss_before.scalar_type() != at::kFloat || !r->loss_before.device().is_cpu())) return false;
  const bool shrinks = !config.full_matrices && config.downsample > 0 && largest_side > config.downsample;
  return !(in.matrices && shrinks);
}

std::vector<double> collect_fused_probes(Frame& frame, const ProbeInputs& in) {
  at::NoGradGuard no_grad;
  const LanguageModel& model = *in.model;
  const MemoryRule& rule = model->rule();
  const int64_t L = model->layers();
  const MemoryState& first = in.state->blocks.front().memory;
  const int64_t W = static_cast<int64_t>(first.memory.size()), H = first.memory[0].size(1);
  frame.layers = static_cast<int>(L);
  frame.heads = static_cast<int>(H);
  frame.weights = first.names;
  frame.matrices.clear();

  auto record_of = [&](int64_t l) -> const StepRecord* {
    if (!in.records || static_cast<int64_t>(in.records->size()) <= l || !(*in.records)[static_cast<size_t>(l)]) return nullptr;
    return &*(*in.records)[static_cast<size_t>(l)];
  };
  bool all_records = in.records != nullptr;
  for (int64_t l = 0; l < L; ++l) all_records = all_records && record_of(l);
  const bool muon = rule.optimiser == Optimiser::Muon;
  const bool have_before = in.memory_before && static_cast<int64_t>(in.memory_before->size()) == L;
  // Per weight (M; or W1, W2 of an MLP memory) and layer: [B,H,rows,cols] contiguous.
  struct Weight {
    int64_t rows = 0, cols = 0, area = 0, rank = 0;
    std::vector<at::Tensor> memory, momentum, before, ns;  // per layer
  };
  std::vector<Weight> weights(static_cast<size_t>(W));
  for (int64_t w = 0; w < W; ++w) {
    Weight& x = weights[static_cast<size_t>(w)];
    x.rows = first.memory[static_cast<size_t>(w)].size(-2);
    x.cols = first.memory[static_cast<size_t>(w)].size(-1);
    x.area = x.rows * x.cols;
    x.rank = std::min(x.rows, x.cols);
    for (int64_t l = 0; l < L; ++l) {
      const MemoryState& s = in.state->blocks[static_cast<size_t>(l)].memory;
      x.memory.push_back(s.memory[static_cast<size_t>(w)].contiguous());
      x.momentum.push_back(s.momentum[static_cast<size_t>(w)].contiguous());
      if (have_before) x.before.push_back((*in.memory_before)[static_cast<size_t>(l)][static_cast<size_t>(w)].to(at::kFloat).contiguous());
      if (muon) {  // U = NS(S): what the step applied, or (no record: a train frame) NS of S's finite part
        const StepRecord* r = all_records ? record_of(l) : nullptr;
        x.ns.push_back(r && static_cast<int64_t>(r->ns_output.size()) > w
                           ? r->ns_output[static_cast<size_t>(w)].contiguous()
                           : newton_schulz_small(at::nan_to_num(x.momentum.back().select(0, 0), 0.0, 0.0, 0.0), rule.ns));
      }
    }
  }

  // Σ S_t² and Σ (M_t − M_{t−1})² of weight w, layer l, head h (batch row 0) where the step summed
  // them as it wrote them (StepRecord::weight_squares, the fused MLP step's): then this thread does
  // not read S_t and M_{t−1}, whose lines the stepping core has just written. Reading them cost that
  // core's next step more than reading them cost here (README "What the probes' thread does to the
  // engine's step").
  auto record_squares = [&](int64_t l, int64_t h, int64_t w) -> const double* {
    const StepRecord* r = all_records ? record_of(l) : nullptr;
    if (!r || r->weight_squares.size() < static_cast<size_t>(H * W * 2)) return nullptr;
    return r->weight_squares.data() + (h * W + w) * 2;
  };

  // Head metrics (SPEC §8), in HeadMetric order.
  frame.head_metrics.assign(static_cast<size_t>(L * H * kHeadMetricCount), kNaN);
  std::vector<bool> head_bad(static_cast<size_t>(L * H), false);
  if (all_records)
    for (int64_t l = 0; l < L; ++l) {
      const StepRecord& r = *record_of(l);
      const at::Tensor retain = r.retain.contiguous(), lr = r.lr.contiguous(), beta = r.momentum.contiguous(),
                       gamma = r.token_gamma.contiguous(), loss_before = r.loss_before.contiguous(),
                       loss_after = r.loss_after.contiguous();
      at::Tensor phi_k, window;
      if (rule.optimiser == Optimiser::Dgd) {
        phi_k = r.phi_k.contiguous();
        window = r.gamma.contiguous();
      }
      for (int64_t h = 0; h < H; ++h) {
        float* out = frame.head_metrics.data() + (l * H + h) * kHeadMetricCount;
        const float alpha = rule.retention == Retention::None ? 1.0f : row0(retain)[h];
        const float eta = row0(lr)[h];
        float lo = alpha, hi = alpha;
        if (rule.optimiser == Optimiser::Dgd) {
          // (αI − wηφφᵀ): α − wη‖φ‖² along φ, α on its complement; w = the token's window weight × s.
          const int64_t d_phi = phi_k.size(-1), c = window.size(-1);
          float phi_sq = 0;
          for (int64_t i = 0; i < d_phi; ++i) phi_sq += row0(phi_k)[h * d_phi + i] * row0(phi_k)[h * d_phi + i];
          const float w = row0(window)[h * c + c - 1] * static_cast<float>(inner_loss_scale(rule, r.v.size(-1)));
          const float along = alpha - eta * phi_sq * w;
          lo = std::min(alpha, along);
          hi = std::max(alpha, along);
        }
        const float b = row0(loss_before)[h], a = row0(loss_after)[h];
        const float values[kHeadMetricCount] = {alpha, eta, row0(beta)[h], row0(gamma)[h], lo, hi, b, a, b - a};
        std::copy(values, values + kHeadMetricCount, out);
        head_bad[static_cast<size_t>(l * H + h)] = !all_finite(values, kHeadMetricCount);
      }
    }

  frame.weight_metrics.assign(static_cast<size_t>(L * H * W * kWeightMetricCount), kNaN);
  // One SVD call for every spectrum of every weight: M's (zeroed where not finite) for the erank,
  // then U's for the NS error, per weight, each of batch row 0. A tall matrix goes in transposed
  // (σ(Xᵀ) = σ(X)), so that an MLP memory's W1 [d,4d] and W2 [4d,d] share one call: the batched
  // SVD takes 8 or 16 matrices at a time (small_singular_values.h), and at d = 16 four heads' W1
  // alone took 53 µs where eight matrices take 62.
  const int64_t per_weight = (muon ? 2 : 1) * L * H;
  bool one_shape = true;
  for (const Weight& x : weights)
    one_shape = one_shape && x.rank == weights[0].rank && x.area == weights[0].area;
  std::vector<at::Tensor> stacks;  // one, or one per weight when their shapes differ
  // Per weight, then layer and head: M, S, U not all finite.
  std::vector<std::vector<bool>> bad_m(static_cast<size_t>(W), std::vector<bool>(static_cast<size_t>(L * H)));
  std::vector<std::vector<bool>> bad_s = bad_m, bad_u = bad_m;
  for (int64_t w = 0; w < W; ++w) {
    const Weight& x = weights[static_cast<size_t>(w)];
    if (!one_shape || w == 0)
      stacks.push_back(
          at::empty({(one_shape ? W : 1) * per_weight, x.rank, x.area / x.rank}, first.memory[0].options()));
    float* to = stacks.back().data_ptr<float>() + (one_shape ? w : 0) * per_weight * x.area;
    auto& m_bad = bad_m[static_cast<size_t>(w)];
    auto& s_bad = bad_s[static_cast<size_t>(w)];
    auto& u_bad = bad_u[static_cast<size_t>(w)];
    for (int pass = 0; pass < (muon ? 2 : 1); ++pass)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t h = 0; h < H; ++h, to += x.area) {
          const float* from = row0(pass == 0 ? x.memory[static_cast<size_t>(l)] : x.ns[static_cast<size_t>(l)]) + h * x.area;
          const bool finite = x.rows > x.cols ? copy_finite_transposed(from, x.rows, x.cols, to)
                                              : copy_finite(from, to, x.area);
          const size_t at = static_cast<size_t>(l * H + h);
          if (pass == 0) {
            m_bad[at] = !finite;
            const double* squares = record_squares(l, h, w);
            s_bad[at] = squares ? !std::isfinite(squares[0])  // no square of a float overflows a double
                                : !all_finite(row0(x.momentum[static_cast<size_t>(l)]) + h * x.area, x.area);
          } else {
            u_bad[at] = s_bad[at] || !finite;
          }
        }
  }
  std::vector<at::Tensor> sigmas;  // [matrices, rank] per call, descending
  for (const at::Tensor& stack : stacks) sigmas.push_back(small_singular_values(stack).contiguous());

  for (int64_t w = 0; w < W; ++w) {
    const Weight& x = weights[static_cast<size_t>(w)];
    const int64_t rank = x.rank;
    const float* spectra = one_shape ? sigmas[0].data_ptr<float>() + w * per_weight * rank
                                     : sigmas[static_cast<size_t>(w)].data_ptr<float>();
    const auto& bad_m_w = bad_m[static_cast<size_t>(w)];
    const auto& bad_s_w = bad_s[static_cast<size_t>(w)];
    const auto& bad_u_w = bad_u[static_cast<size_t>(w)];

    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h) {
        const size_t at = static_cast<size_t>(l * H + h);
        float* out = frame.weight_metrics.data() + (static_cast<int64_t>(at) * W + w) * kWeightMetricCount;  // [L,H,W,K]
        const float* m = row0(x.memory[static_cast<size_t>(l)]) + h * x.area;
        const double* squares = record_squares(l, h, w);
        out[static_cast<int>(WeightMetric::NormM)] = frobenius(m, nullptr, x.area);
        out[static_cast<int>(WeightMetric::NormS)] =
            squares ? static_cast<float>(std::sqrt(squares[0]))
                    : frobenius(row0(x.momentum[static_cast<size_t>(l)]) + h * x.area, nullptr, x.area);
        if (have_before)
          out[static_cast<int>(WeightMetric::NormDM)] =
              squares ? static_cast<float>(std::sqrt(squares[1]))
                      : frobenius(m, row0(x.before[static_cast<size_t>(l)]) + h * x.area, x.area);
        // Effective rank: exp of the entropy of σ/Σσ (matrix_metrics.cpp), 0 for a zero matrix.
        const float* s = spectra + static_cast<int64_t>(at) * rank;
        double total = 0, entropy = 0;
        for (int64_t i = 0; i < rank; ++i) total += s[i];
        for (int64_t i = 0; i < rank && total > 0; ++i) {
          const double p = s[i] / total;
          if (p > 0) entropy -= p * std::log(p);
        }
        if (!bad_m_w[at])
          out[static_cast<int>(WeightMetric::Erank)] =
              total > 0 ? static_cast<float>(std::exp(entropy)) : 0.0f;
        if (muon && !bad_u_w[at]) {  // ‖UᵀU − I‖_F/√r from U's singular values
          const float* u = spectra + (L * H + static_cast<int64_t>(at)) * rank;
          double error = 0;
          for (int64_t i = 0; i < rank; ++i) error += (static_cast<double>(u[i]) * u[i] - 1.0) * (static_cast<double>(u[i]) * u[i] - 1.0);
          out[static_cast<int>(WeightMetric::NsError)] = static_cast<float>(std::sqrt(error / static_cast<double>(rank)));
          out[static_cast<int>(WeightMetric::NsSmin)] = u[rank - 1];
          out[static_cast<int>(WeightMetric::NsSmax)] = u[0];
        }
        out[static_cast<int>(WeightMetric::NonFinite)] =
            static_cast<float>(bad_m_w[at] + 2 * bad_s_w[at] + 4 * head_bad[at]);
      }
  }

  // Snapshots per weight, tensor, layer and head, as collect_probes orders them; at full size. Their
  // buffers are the engine's, made ahead (snapshot_buffers.h), where it has some.
  auto buffer = [&](int64_t n) { return snapshot_buffer(in.snapshot_buffers, static_cast<size_t>(n)); };
  if (in.matrices)
    for (int64_t w = 0; w < W; ++w) {
      const Weight& x = weights[static_cast<size_t>(w)];
      for (const char* tensor : {"M", "S", "dM"}) {
        if (std::string(tensor) == "dM" && !have_before) continue;
        for (int64_t l = 0; l < L; ++l)
          for (int64_t h = 0; h < H; ++h) {
            MatrixSnapshot snap;
            snap.layer = static_cast<int>(l);
            snap.head = static_cast<int>(h);
            snap.weight = frame.weights[static_cast<size_t>(w)];
            snap.tensor = tensor;
            snap.rows = snap.full_rows = static_cast<int>(x.rows);
            snap.cols = snap.full_cols = static_cast<int>(x.cols);
            const float* m = row0(x.memory[static_cast<size_t>(l)]) + h * x.area;
            snap.values = buffer(x.area);
            if (std::string(tensor) == "S") {
              const float* s = row0(x.momentum[static_cast<size_t>(l)]) + h * x.area;
              std::copy(s, s + x.area, snap.values.begin());
            } else if (std::string(tensor) == "M") {
              std::copy(m, m + x.area, snap.values.begin());
            } else {
              const float* was = row0(x.before[static_cast<size_t>(l)]) + h * x.area;
              for (int64_t i = 0; i < x.area; ++i) snap.values[static_cast<size_t>(i)] = m[i] - was[i];
            }
            frame.matrices.push_back(std::move(snap));
          }
      }
    }

  if (in.matrices && in.snapshot_buffers) in.snapshot_buffers->frame_done();
  const float nothing = 0;  // no HOPE or CMS parts: this clears the frame's fields for them
  unpack_hope_probes(frame, model, *in.state, in.records, &nothing);
  std::vector<double> extras;
  for (const auto& e : in.extra) extras.push_back(static_cast<double>(e.detach().to(at::kFloat).item<float>()));
  return extras;
}

}  // namespace memscope::model
