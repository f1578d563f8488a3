#include "model/memory/batched_matmul.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "model/memory/small_gemm.h"
#include "model/util/autocast.h"
#include "model/util/cpu_kernels.h"

namespace memscope::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> batch_sizes(const at::Tensor& t) { return t.sizes().slice(0, t.dim() - 2).vec(); }

// A column-major k×n matrix (element (p, j) at j·k + p) into row-major `rows` (at p·n + j), by
// 8×8 tiles, so that both sides' cache lines are used whole, and inside a tile by 4×4 blocks moved
// through registers: four columns' 4-float pieces in, shuffled, four rows' pieces out. Element by
// element, the copy of a [64,256] weight's transpose was a sixth of HOPE's training step.
using Quad = float __attribute__((vector_size(4 * sizeof(float))));

// Lanes of a and b (0–3 from a, 4–7 from b), in GCC's spelling or Clang's.
template <int I0, int I1, int I2, int I3>
[[gnu::always_inline]] inline Quad pick(Quad a, Quad b) {
#if defined(__clang__)
  return __builtin_shufflevector(a, b, I0, I1, I2, I3);
#else
  using Index = int __attribute__((vector_size(4 * sizeof(int))));
  return __builtin_shuffle(a, b, Index{I0, I1, I2, I3});
#endif
}

void transpose_block4(const float* column_major, int64_t k, int64_t n, float* rows) {
  Quad c[4];
  for (int q = 0; q < 4; ++q) std::memcpy(&c[q], column_major + q * k, sizeof(Quad));  // columns j..j+3
  const Quad low01 = pick<0, 4, 1, 5>(c[0], c[1]), low23 = pick<0, 4, 1, 5>(c[2], c[3]);
  const Quad high01 = pick<2, 6, 3, 7>(c[0], c[1]), high23 = pick<2, 6, 3, 7>(c[2], c[3]);
  const Quad r[4] = {pick<0, 1, 4, 5>(low01, low23), pick<2, 3, 6, 7>(low01, low23),
                     pick<0, 1, 4, 5>(high01, high23), pick<2, 3, 6, 7>(high01, high23)};
  for (int q = 0; q < 4; ++q) std::memcpy(rows + q * n, &r[q], sizeof(Quad));  // rows p..p+3
}

void transpose_to_rows(const float* column_major, int64_t k, int64_t n, float* rows) {
  constexpr int64_t kTile = 8;
  for (int64_t j0 = 0; j0 < n; j0 += kTile)
    for (int64_t p0 = 0; p0 < k; p0 += kTile) {
      const int64_t j1 = std::min(n, j0 + kTile), p1 = std::min(k, p0 + kTile);
      if (j1 - j0 == kTile && p1 - p0 == kTile) {
        for (int64_t j = j0; j < j1; j += 4)
          for (int64_t p = p0; p < p1; p += 4)
            transpose_block4(column_major + j * k + p, k, n, rows + p * n + j);
        continue;
      }
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t j = j0; j < j1; ++j) rows[p * n + j] = column_major[j * k + p];
    }
}

// The product without autograd. Both batches broadcast to one shape; x's matrices are read through
// their strides (small_gemm's A, so a transposed view costs nothing). small_gemm reads B's rows a
// register wide, so y's matrices must be row-major. A transposed weight (W₂ᵀ, column-major):
// - against fewer than 16 rows (a chunk's few tokens, or one token's row) is read in place by
//   small_gemm_nt, as dot products of x's rows with W's. Each matrix had been transposed into a
//   scratch first, which cost more than the product: two fifths of the CMS's one-token products'
//   time, and 13% of HOPE's training step.
// - against more rows, is taken as the transposed product, (x y)ᵀ = yᵀ xᵀ with yᵀ row-major, where
//   copying x and the result through a scratch buffer moves less than copying y would (a chunk of
//   at least 16 tokens against a [d,4d] weight); else it is transposed matrix by matrix into a
//   thread's scratch, where it stays in cache for the product.
// Any other layout of y, and a transposed y broadcast over the batch that the first route does not
// take, is copied whole once.
at::Tensor stacked_product(const at::Tensor& x_in, const at::Tensor& y_in) {
  const int64_t m = x_in.size(-2), k = x_in.size(-1), n = y_in.size(-1);
  std::vector<int64_t> batch = at::infer_size(batch_sizes(x_in), batch_sizes(y_in));
  const int64_t batch_count = std::accumulate(batch.begin(), batch.end(), int64_t{1}, std::multiplies<>());
  const bool row_major = y_in.stride(-1) == 1 && y_in.stride(-2) == n;
  const bool y_column_major =
      !row_major && y_in.stride(-2) == 1 && y_in.stride(-1) == k && fits_gemm_index(y_in.stride(-1));
  const bool in_place = y_column_major && m < 16;
  // m ≥ 16: the transposed product's rows are x's m columns, and below a register's width
  // small_gemm takes them one scalar at a time.
  const bool transposed = y_column_major && !in_place && m * (k + n) < k * n;
  const bool transpose_each = y_column_major && !in_place && !transposed && k * n > 0 &&
                              y_in.numel() / (k * n) == batch_count;  // not broadcast
  const at::Tensor y = row_major || in_place || transposed || transpose_each ? y_in : y_in.contiguous();
  // small_gemm_nt reads x's rows whole: a few rows, copied if they are not.
  const at::Tensor x = in_place && k > 1 && x_in.stride(-1) != 1 ? x_in.contiguous() : x_in;
  auto matrices_of = [&](int64_t rows, int64_t cols) {
    std::vector<int64_t> sizes = batch;
    sizes.push_back(rows);
    sizes.push_back(cols);
    return sizes;
  };
  const at::Tensor xe = x.expand(matrices_of(m, k)), ye = y.expand(matrices_of(k, n));
  at::Tensor out = at::empty(matrices_of(m, n), x.options());
  if (out.numel() == 0) return out;
  if (k == 0) return out.zero_();
  const int64_t count = out.numel() / (m * n), dims = static_cast<int64_t>(batch.size());
  // Each matrix's start in x and y: its batch index through the expanded strides (0 where broadcast).
  std::vector<int64_t> x_at(count), y_at(count);
  for (int64_t b = 0; b < count; ++b) {
    int64_t rest = b, xo = 0, yo = 0;
    for (int64_t d = dims - 1; d >= 0; --d) {
      const int64_t i = rest % batch[d];
      rest /= batch[d];
      xo += i * xe.stride(d);
      yo += i * ye.stride(d);
    }
    x_at[b] = xo;
    y_at[b] = yo;
  }
  const float* xp = xe.data_ptr<float>();
  const float* yp = ye.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int ai = static_cast<int>(xe.stride(-2)), ap = static_cast<int>(xe.stride(-1));
  const int rows = static_cast<int>(m), inner = static_cast<int>(k), cols = static_cast<int>(n);
  // A thread's share is worth its start at about 32k multiply-adds.
  const int64_t grain = std::max<int64_t>(1, 32768 / (m * k * n));
  if (in_place) {
    at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        small_gemm_nt(xp + x_at[b], ai, yp + y_at[b], op + b * m * n, rows, inner, cols);
    });
    return out;
  }
  if (transpose_each) {
    at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
      std::vector<float> y_rows(static_cast<size_t>(k * n));
      for (int64_t b = begin; b < end; ++b) {
        transpose_to_rows(yp + y_at[b], k, n, y_rows.data());
        small_gemm(xp + x_at[b], ai, ap, y_rows.data(), nullptr, op + b * m * n, rows, inner, cols, 1.0f,
                   0.0f);
      }
    });
    return out;
  }
  if (!transposed) {
    at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        small_gemm(xp + x_at[b], ai, ap, yp + y_at[b], nullptr, op + b * m * n, rows, inner, cols, 1.0f,
                   0.0f);
    });
    return out;
  }
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> x_t(static_cast<size_t>(k * m)), out_t(static_cast<size_t>(n * m));
    for (int64_t b = begin; b < end; ++b) {
      const float* xb = xp + x_at[b];
      for (int64_t i = 0; i < m; ++i)  // xᵀ, row-major [k,m]
        for (int64_t p = 0; p < k; ++p) x_t[p * m + i] = xb[i * ai + p * ap];
      // (x y)ᵀ [n,m] = yᵀ xᵀ: yᵀ(j,p) = y(p,j) lies at j·k + p, a row-major A.
      small_gemm(yp + y_at[b], inner, 1, x_t.data(), nullptr, out_t.data(), cols, inner, rows, 1.0f, 0.0f);
      float* ob = op + b * m * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) ob[i * n + j] = out_t[j * m + i];
    }
  });
  return out;
}

// Whether a stack's matrices are column-major: the transposed view of a row-major stack (a weight's
// Wᵀ).
bool column_major(const at::Tensor& t) { return t.stride(-2) == 1 && t.stride(-1) == t.size(-2); }

// d(x y) = dx y + x dy: both gradients are products of the same kind, through batched_matmul, so
// that a backward taken with create_graph is itself differentiable. A broadcast operand's gradient
// is summed back to its shape. An operand that is a transposed view gets its gradient in that view
// too, computed as the transposed product: the transpose's own backward then hands a row-major
// gradient to the weight, where autograd adds it to the weight's other gradients; a column-major
// one would be added element by element across rows, a weight-sized strided pass.
struct BatchedMatmulFunction : public torch::autograd::Function<BatchedMatmulFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y) {
    ctx->save_for_backward({x, y});
    return stacked_product(x, y);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &y = saved[1], &g = grad_out[0];
    at::Tensor dx, dy;
    if (ctx->needs_input_grad(0)) {
      dx = column_major(x) ? batched_matmul(y, g.transpose(-1, -2)).transpose(-1, -2)
                           : batched_matmul(g, y.transpose(-1, -2));
      dx = at::sum_to(dx, x.sizes());
    }
    if (ctx->needs_input_grad(1)) {
      dy = column_major(y) ? batched_matmul(g.transpose(-1, -2), x).transpose(-1, -2)
                           : batched_matmul(x.transpose(-1, -2), g);
      dy = at::sum_to(dy, y.sizes());
    }
    return {dx, dy};
  }
};

// MEMSCOPE_BATCHED_MATMUL=0 leaves every product to at::matmul, for a run beside one with the loop
// (bench/deep_train_compare.sh), or to tell its last bits from BLAS's.
bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MEMSCOPE_BATCHED_MATMUL");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

}  // namespace

bool batched_matmul_applies(const at::Tensor& x, const at::Tensor& y) {
  if (!enabled() || x.dim() < 3 || y.dim() < 3 || x.scalar_type() != at::kFloat ||
      y.scalar_type() != at::kFloat)
    return false;
  if (x.layout() != at::kStrided || y.layout() != at::kStrided || x.device() != y.device()) return false;
  if (!cpu_kernels_on(x.device()) || autocast_enabled(c10::DeviceType::CPU)) return false;
  const int64_t m = x.size(-2), k = x.size(-1), n = y.size(-1);
  if (k != y.size(-2) || m > kBatchedMatmulMaxSide || k > kBatchedMatmulMaxSide || n > kBatchedMatmulMaxSide)
    return false;
  // small_gemm indexes A in int: x's matrices are read through their own strides, and its last
  // element must be reachable; B and C are row-major, at most 256² apart.
  return fits_gemm_index(x.stride(-2)) && fits_gemm_index(x.stride(-1)) &&
         fits_gemm_index(std::max<int64_t>(0, m - 1) * x.stride(-2) +
                         std::max<int64_t>(0, k - 1) * x.stride(-1));
}

at::Tensor batched_matmul(const at::Tensor& x, const at::Tensor& y) {
  if (!batched_matmul_applies(x, y)) return at::matmul(x, y);
  if (at::GradMode::is_enabled() && (x.requires_grad() || y.requires_grad()))
    return BatchedMatmulFunction::apply(x, y);
  return stacked_product(x, y);
}

}  // namespace memscope::model
