#include "model/probe/shown_matrices.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "model/probe/small_singular_values.h"
#include "model/util/simd_clones.h"
#include "model/util/work_share.h"

namespace memscope::model {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The finite entries' min and max, and the NaN and Inf counts, of n floats, into out[0..3]. x − x
// is 0 exactly when x is finite. Kept in kRangeLanes running values, each lane one vector element:
// a min or max reduction over the whole array GCC does not vectorise without -ffinite-math-only,
// and it ran one float at a time, about 1 ms of a HOPE snapshot frame's 655,360 (Intel VM).
constexpr int64_t kRangeLanes = 16;

MEMSCOPE_SIMD_CLONES
void range_of(const float* __restrict x, int64_t n, float* __restrict out) {
  float lo[kRangeLanes], hi[kRangeLanes];
  int32_t nans[kRangeLanes] = {}, nonfinite[kRangeLanes] = {};
  for (int64_t lane = 0; lane < kRangeLanes; ++lane) {
    lo[lane] = kInf;
    hi[lane] = -kInf;
  }
  auto take = [&](int64_t lane, float v) {
    const bool finite = v - v == 0.0f;
    const float low = finite ? v : kInf, high = finite ? v : -kInf;
    lo[lane] = low < lo[lane] ? low : lo[lane];
    hi[lane] = high > hi[lane] ? high : hi[lane];
    nans[lane] += static_cast<int32_t>(v != v);
    nonfinite[lane] += static_cast<int32_t>(!finite);
  };
  const int64_t whole = n / kRangeLanes * kRangeLanes;
  for (int64_t i = 0; i < whole; i += kRangeLanes)
    for (int64_t lane = 0; lane < kRangeLanes; ++lane) take(lane, x[i + lane]);
  for (int64_t i = whole; i < n; ++i) take(i - whole, x[i]);
  float low = kInf, high = -kInf;
  int32_t nan_count = 0, nonfinite_count = 0;
  for (int64_t lane = 0; lane < kRangeLanes; ++lane) {
    low = std::min(low, lo[lane]);
    high = std::max(high, hi[lane]);
    nan_count += nans[lane];
    nonfinite_count += nonfinite[lane];
  }
  out[0] = low;
  out[1] = high;
  out[2] = static_cast<float>(nan_count);
  out[3] = static_cast<float>(nonfinite_count - nan_count);
}

// to[k] += from[k]: one row of a window into its column sums.
MEMSCOPE_SIMD_CLONES
void add_row(const float* __restrict from, float* __restrict to, int64_t n) {
  for (int64_t k = 0; k < n; ++k) to[k] += from[k];
}

// at::adaptive_avg_pool2d's windows: output i of `out` averages inputs [⌊i·in/out⌋, ⌈(i+1)·in/out⌉).
int64_t window_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
int64_t window_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// out = a − b, as at::sub computes it in float.
MEMSCOPE_SIMD_CLONES
void difference(const float* __restrict a, const float* __restrict b, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
}

// One r×c matrix's area means, rr×cc: per output row, its window's rows summed column by column
// (a vector add per row), then each output's columns of that sum. NaN and Inf propagate as the
// ATen op's sums do.
void pool_matrix(const float* m, int64_t r, int64_t c, float* out, int64_t rr, int64_t cc,
                 float* column_sums) {
  for (int64_t i = 0; i < rr; ++i) {
    const int64_t r0 = window_start(i, r, rr), r1 = window_end(i, r, rr);
    std::fill(column_sums, column_sums + c, 0.0f);
    for (int64_t a = r0; a < r1; ++a) add_row(m + a * c, column_sums, c);
    for (int64_t j = 0; j < cc; ++j) {
      const int64_t c0 = window_start(j, c, cc), c1 = window_end(j, c, cc);
      float sum = 0.0f;
      for (int64_t b = c0; b < c1; ++b) sum += column_sums[b];
      out[i * cc + j] = sum / static_cast<float>((r1 - r0) * (c1 - c0));
    }
  }
}

// The summary's range columns as ATen calls, for any device and dtype: [N, 4].
at::Tensor range_aten(const at::Tensor& full) {
  const at::Tensor entries = full.flatten(-2).to(at::kFloat);  // [N, r·c]
  const at::Tensor bad = at::logical_not(at::isfinite(entries));
  const double inf = std::numeric_limits<double>::infinity();
  return at::stack({entries.masked_fill(bad, inf).amin(-1), entries.masked_fill(bad, -inf).amax(-1),
                    at::isnan(entries).sum(-1).to(at::kFloat), at::isinf(entries).sum(-1).to(at::kFloat)},
                   -1);
}

}  // namespace

std::pair<int64_t, int64_t> shown_shape(int64_t rows, int64_t cols, int64_t largest) {
  if (largest <= 0 || std::max(rows, cols) <= largest) return {rows, cols};
  const double factor = static_cast<double>(std::max(rows, cols)) / static_cast<double>(largest);
  auto side = [&](int64_t n) {
    const auto shrunk = static_cast<int64_t>(std::ceil(static_cast<double>(n) / factor));
    return std::min(std::max<int64_t>(1, shrunk), largest);
  };
  return {side(rows), side(cols)};
}

at::Tensor downsample_matrix(const at::Tensor& m, int64_t largest) {
  const auto [rows, cols] = shown_shape(m.size(-2), m.size(-1), largest);
  if (rows == m.size(-2) && cols == m.size(-1)) return m;
  return at::adaptive_avg_pool2d(m.unsqueeze(0), {rows, cols}).squeeze(0);
}

std::vector<at::Tensor> singular_values_together(const std::vector<at::Tensor>& stacks) {
  std::vector<at::Tensor> out;
  if (stacks.empty()) return out;
  auto sides = [](const at::Tensor& t) {
    return std::pair<int64_t, int64_t>{std::min(t.size(-2), t.size(-1)), std::max(t.size(-2), t.size(-1))};
  };
  bool together = true;
  for (const at::Tensor& t : stacks)
    together = together && t.dim() == 3 && t.device().is_cpu() && t.scalar_type() == at::kFloat &&
               sides(t) == sides(stacks.front()) && sides(t).first <= kSmallSingularValueSide;
  if (!together) {
    for (const at::Tensor& t : stacks) out.push_back(small_singular_values(at::nan_to_num(t, 0.0, 0.0, 0.0)));
    return out;
  }
  const int64_t k = sides(stacks.front()).first;
  std::vector<at::Tensor> sources;  // contiguous, alive until the call returns
  std::vector<HostMatrix> matrices;
  for (const at::Tensor& t : stacks) {
    sources.push_back(t.contiguous());
    const int64_t r = t.size(1), c = t.size(2);
    for (int64_t i = 0; i < t.size(0); ++i)
      matrices.push_back({sources.back().data_ptr<float>() + i * r * c, r, c});
  }
  const at::Tensor sigma = at::empty({static_cast<int64_t>(matrices.size()), k}, stacks.front().options());
  small_singular_values_into(matrices, NonFinite::ReadAsZero, sigma.data_ptr<float>());
  int64_t first = 0;
  for (const at::Tensor& t : stacks) {
    out.push_back(sigma.narrow(0, first, t.size(0)));
    first += t.size(0);
  }
  return out;
}

void show_host_matrices(const std::vector<HostSnapshotMatrix>& matrices, int64_t largest,
                        const std::vector<float*>& shown, const std::vector<float*>& summary) {
  TORCH_CHECK(shown.size() == matrices.size() && summary.size() == matrices.size(),
              "show_host_matrices: ", matrices.size(), " matrices, ", shown.size(), " shown and ",
              summary.size(), " summaries");
  if (matrices.empty()) return;
  const auto sides = [](const HostSnapshotMatrix& x) {
    return std::pair<int64_t, int64_t>{std::min(x.rows, x.cols), std::max(x.rows, x.cols)};
  };
  const int64_t k = sides(matrices.front()).first;
  // Checked before anything is written: a group's ΔM scratch is sized by its first matrix.
  for (const HostSnapshotMatrix& x : matrices) {
    TORCH_CHECK(sides(x) == sides(matrices.front()), "show_host_matrices: a ", x.rows, "×", x.cols,
                " matrix among ", matrices.front().rows, "×", matrices.front().cols, " ones");
    TORCH_CHECK(shown_shape(x.rows, x.cols, largest) != std::make_pair(x.rows, x.cols),
                "show_host_matrices: a ", x.rows, "×", x.cols, " matrix is not shrunk at ", largest);
  }
  const auto groups = singular_value_groups(static_cast<int64_t>(matrices.size()));
  const auto one_group = [&](int64_t g) {
    const auto [first, count] = groups[static_cast<size_t>(g)];
    const int64_t area =
        matrices[static_cast<size_t>(first)].rows * matrices[static_cast<size_t>(first)].cols;
    // This thread's: the group's ΔM (at most 16 × 64 KB for HOPE), and a row of column sums.
    thread_local std::vector<float> differences, column_sums;
    differences.resize(std::max(differences.size(), static_cast<size_t>(count * area)));
    std::vector<HostMatrix> views;
    for (int64_t j = 0; j < count; ++j) {
      const size_t i = static_cast<size_t>(first + j);
      const HostSnapshotMatrix& x = matrices[i];
      const float* data = x.now;
      if (x.before) {
        float* into = differences.data() + j * area;
        difference(x.now, x.before, into, area);
        data = into;
      }
      const auto [rows, cols] = shown_shape(x.rows, x.cols, largest);
      column_sums.resize(std::max(column_sums.size(), static_cast<size_t>(x.cols)));
      range_of(data, area, summary[i] + k);
      pool_matrix(data, x.rows, x.cols, shown[i], rows, cols, column_sums.data());
      views.push_back({data, x.rows, x.cols});
    }
    // One group: small_singular_values_into computes it here, not shared again.
    std::vector<float> sigma(static_cast<size_t>(count * k));
    small_singular_values_into(views, NonFinite::ReadAsZero, sigma.data());
    for (int64_t j = 0; j < count; ++j)
      std::copy(sigma.begin() + j * k, sigma.begin() + (j + 1) * k, summary[static_cast<size_t>(first + j)]);
  };
  // Shared as small_singular_values shares its groups: only where a group takes long enough.
  if (k >= kSharedSingularValueSide) {
    for_each_shared(static_cast<int64_t>(groups.size()), one_group);
  } else {
    for (int64_t g = 0; g < static_cast<int64_t>(groups.size()); ++g) one_group(g);
  }
}

ShownMatrices show_matrices(const at::Tensor& full, int64_t largest, const at::Tensor& known) {
  TORCH_CHECK(full.dim() == 3, "show_matrices: expected [N, r, c], got ", full.sizes());
  const int64_t count = full.size(0), r = full.size(1), c = full.size(2);
  const auto [rows, cols] = shown_shape(r, c, largest);
  if (rows == r && cols == c) return {full, {}};
  const int64_t k = std::min(r, c);

  if (!full.device().is_cpu() || full.scalar_type() != at::kFloat) {
    const at::Tensor range = range_aten(full);
    // The SVDs fail on NaN input: they measure zeroed copies.
    const at::Tensor sigma =
        known.defined() ? known : small_singular_values(at::nan_to_num(full, 0.0, 0.0, 0.0));
    return {downsample_matrix(full, largest), at::cat({sigma.to(at::kFloat).reshape({count, k}), range}, -1)};
  }

  const at::Tensor source = full.contiguous();
  const float* from = source.data_ptr<float>();
  at::Tensor shown = at::empty({count, rows, cols}, full.options());
  at::Tensor summary = at::empty({count, k + 4}, full.options());
  float* to = summary.data_ptr<float>();
  std::vector<float> column_sums(static_cast<size_t>(c));
  bool any_bad = false;
  for (int64_t n = 0; n < count; ++n) {
    const float* matrix = from + n * r * c;
    float* range = to + n * (k + 4) + k;
    range_of(matrix, r * c, range);
    any_bad = any_bad || range[2] + range[3] > 0;
    pool_matrix(matrix, r, c, shown.data_ptr<float>() + n * rows * cols, rows, cols, column_sums.data());
  }
  // Most frames have no NaN or Inf: the zeroed copy is made only when one has.
  const at::Tensor sigma =
      (known.defined() ? known
                       : small_singular_values(any_bad ? at::nan_to_num(source, 0.0, 0.0, 0.0) : source))
          .to(at::kFloat)
          .reshape({count, k})
          .contiguous();
  const float* s = sigma.data_ptr<float>();
  for (int64_t n = 0; n < count; ++n) std::copy(s + n * k, s + (n + 1) * k, to + n * (k + 4));
  return {shown, summary};
}

}  // namespace memscope::model
