// batched_matmul (model/memory/batched_matmul.h): stacks of small float32 matrices through
// small_gemm on the CPU, with a backward of the same products. Held to at::matmul in float64 for
// every shape the memory passes it (broadcast batches, transposed views, ragged sides, empty
// sides), its gradients and second derivatives to autograd's through at::matmul, and its result to
// be the same bits at any thread count.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <array>
#include <catch2/catch.hpp>

#include "model/memory/batched_matmul.h"
#include "model/memory/small_gemm.h"
#include "model/util/autocast.h"
#include "model/util/cpu_kernels.h"
#include "support/test_device.h"

using namespace memscope::model;

namespace {

struct Case {
  std::vector<int64_t> x, y;
  bool transpose_x = false, transpose_y = false;  // the operand is the transpose of a contiguous tensor
};

at::Tensor operand(const std::vector<int64_t>& sizes, bool transposed) {
  if (!transposed) return torch::randn(sizes);
  std::vector<int64_t> swapped = sizes;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  return torch::randn(swapped).transpose(-1, -2);
}

// The largest difference from the float64 product, relative to the product's largest element.
double relative_error(const at::Tensor& ours, const at::Tensor& x, const at::Tensor& y) {
  const at::Tensor reference = at::matmul(x.to(at::kDouble), y.to(at::kDouble));
  REQUIRE(ours.sizes() == reference.sizes());
  if (reference.numel() == 0) return 0.0;
  const double scale = std::max(1.0, reference.abs().max().item<double>());
  return (ours.to(at::kDouble) - reference).abs().max().item<double>() / scale;
}

const std::vector<Case> kCases = {
    {{64, 4, 16}, {64, 16, 64}},                      // a chunk's keys through W₂ᵀ, B·H stacks
    {{2, 4, 4, 16}, {2, 4, 16, 64}, false, true},     // the same with W₂ᵀ a view (read in place)
    {{16, 1, 1, 64}, {16, 1, 64, 256}, false, true},  // one token through a CMS level's W₁ᵀ
    {{2, 3, 2, 64}, {2, 3, 64, 256}, true, true},     // a transposed x's rows copied, Wᵀ read in place
    {{2, 3, 3}, {2, 3, 10}, false, true},             // fewer terms than a register holds
    {{2, 32, 64}, {2, 64, 64}, false, true},          // 32 rows: transposed one by one
    {{2, 4, 16, 64}, {2, 4, 64, 256}, false, true},   // a chunk of 16 through W₂ᵀ: (x y)ᵀ = yᵀ xᵀ
    {{3, 17, 16}, {1, 16, 40}, true, true},           // both transposed, y broadcast
    {{3, 16, 64}, {1, 64, 256}, true, true},          // the transposed product with x a view, y broadcast
    {{2, 64, 16}, {2, 16, 8}, false, true},           // y transposed, but cheaper to transpose than x
    {{3, 5, 20}, {3, 20, 13}, false, true},           // ragged sides, y read in place
    {{3, 5, 20}, {1, 20, 13}, false, true},           // the same y broadcast
    {{3, 20, 20}, {1, 20, 13}, false, true},          // 20 rows against a broadcast Wᵀ: copied once
    {{2, 4, 64, 4}, {2, 4, 4, 16}, true, false},      // Σ_r δo_r a_rᵀ: the transposed left operand
    {{2, 1, 3, 5, 7}, {4, 1, 7, 9}},                  // batches broadcast both ways
    {{3, 5, 7}, {1, 7, 9}},                           // one right matrix for every left one
    {{2, 3, 1, 17}, {2, 3, 17, 33}},                  // one row; sides off the vector width
    {{2, 3, 33, 1}, {2, 3, 1, 1}},                    // one column
    {{2, 3, 5, 0}, {2, 3, 0, 6}},                     // k = 0: zeros
    {{2, 0, 5, 4}, {2, 0, 4, 6}},                     // no matrices
    {{2, 256, 256}, {2, 256, 256}},                   // the largest side it takes
};

}  // namespace

TEST_CASE("batched_matmul equals at::matmul in float64 for every shape the memory passes it", "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;  // MEMSCOPE_CPU_KERNELS=0: the loop is off
  torch::manual_seed(3);
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    const at::Tensor x = operand(c.x, c.transpose_x), y = operand(c.y, c.transpose_y);
    INFO("case " << i);
    REQUIRE(batched_matmul_applies(x, y));
    // Float32 products of up to 256 terms, summed in order or by lanes: a few ulp of the largest
    // term each.
    CHECK(relative_error(batched_matmul(x, y), x, y) <
          2e-6 * std::sqrt(static_cast<double>(x.size(-1)) + 1.0));
  }
}

TEST_CASE("batched_matmul leaves to at::matmul what it does not take", "[model]") {
  const at::Tensor x = torch::randn({2, 3, 4}), y = torch::randn({2, 4, 5});
  CHECK_FALSE(batched_matmul_applies(x.to(at::kDouble), y.to(at::kDouble)));
  CHECK_FALSE(batched_matmul_applies(x[0], y[0]));  // 2-D: BLAS's mm
  CHECK_FALSE(batched_matmul_applies(torch::randn({2, 3, 300}), torch::randn({2, 300, 5})));
  {
    const ScopedAtenForms gpu_forms;  // the forms a GPU runs
    CHECK_FALSE(batched_matmul_applies(x, y));
  }
  {
    const Bf16Autocast autocast(c10::DeviceType::CPU);  // at::matmul's autocast casts to bfloat16
    CHECK_FALSE(batched_matmul_applies(x, y));
  }
  // Where it does not apply the result is at::matmul's, bit for bit.
  const at::Tensor x64 = x.to(at::kDouble), y64 = y.to(at::kDouble);
  CHECK(at::equal(batched_matmul(x64, y64), at::matmul(x64, y64)));
}

TEST_CASE("batched_matmul's gradients and second derivatives equal autograd's through at::matmul",
          "[model]") {
  torch::manual_seed(5);
  for (size_t i = 0; i < kCases.size() - 1; ++i) {  // all but the 256² case, for time
    const Case& c = kCases[i];
    INFO("case " << i);
    const at::Tensor x0 = operand(c.x, c.transpose_x), y0 = operand(c.y, c.transpose_y);
    const at::Tensor weight = torch::randn(at::matmul(x0, y0).sizes());
    // f = Σ w ⊙ (x y)², whose first gradients depend on x and y, so the second derivative of
    // ⟨∇f, u⟩ exercises the backward's own backward.
    auto derivatives = [&](bool ours) {
      const at::Tensor x = x0.detach().clone().requires_grad_(true),
                       y = y0.detach().clone().requires_grad_(true);
      const at::Tensor product = ours ? batched_matmul(x, y) : at::matmul(x, y);
      const at::Tensor f = (weight * product * product).sum();
      const auto first = torch::autograd::grad({f}, {x, y}, {}, /*retain_graph=*/true, /*create_graph=*/true);
      const at::Tensor directional = (first[0] * x0.cos()).sum() + (first[1] * y0.sin()).sum();
      const auto second = torch::autograd::grad({directional}, {x, y});
      return std::vector<at::Tensor>{first[0].detach(), first[1].detach(), second[0], second[1]};
    };
    const auto ours = derivatives(true), reference = derivatives(false);
    for (size_t d = 0; d < ours.size(); ++d) {
      INFO("derivative " << d << " (first x, first y, second x, second y)");
      REQUIRE(ours[d].sizes() == reference[d].sizes());
      if (reference[d].numel() == 0) continue;
      const double scale = std::max(1.0, reference[d].abs().max().item<double>());
      CHECK((ours[d] - reference[d]).abs().max().item<double>() / scale < 1e-5);
    }
  }
}

TEST_CASE("batched_matmul gives the same bits at any thread count", "[model]") {
  torch::manual_seed(9);
  const at::Tensor x = torch::randn({256, 8, 64}), y = torch::randn({256, 64, 48});
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = batched_matmul(x, y);
  at::set_num_threads(2);
  const at::Tensor two = batched_matmul(x, y);
  at::set_num_threads(before);
  CHECK(at::equal(one, two));
}

TEST_CASE(
    "small_gemm_nt equals the float64 product at every strip width, and each element sums alike in a "
    "full block and alone",
    "[model]") {
  torch::manual_seed(31);
  // m × k against B [n,k]: sides on and off every strip width (4, 8, 16 floats), k below it, and A's
  // rows further apart than k.
  for (const auto& [m, k, n] : std::vector<std::array<int, 3>>{
           {1, 64, 256}, {4, 256, 64}, {5, 20, 13}, {3, 3, 17}, {2, 33, 40}, {1, 1, 1}, {3, 37, 35}}) {
    const at::Tensor a = torch::randn({m, k + 5}).narrow(1, 2, k), b = torch::randn({n, k});
    const int lda = static_cast<int>(a.stride(0));
    const at::Tensor reference = at::matmul(a.to(at::kDouble), b.to(at::kDouble).t());
    const double scale = std::max(1.0, reference.abs().max().item<double>());
    const double bound = 2e-6 * std::sqrt(static_cast<double>(k) + 1.0);
    // 0: the kernel this CPU runs; 4, 8, 16: each width built for the baseline instruction set.
    for (const int width : {0, 4, 8, 16}) {
      INFO("m " << m << ", k " << k << ", n " << n << ", width " << width << " (0: this CPU's kernel)");
      auto product = [&](const float* rows, float* out, int count) {
        if (width == 0)
          small_gemm_nt(a.data_ptr<float>(), lda, rows, out, m, k, count);
        else
          small_gemm_nt_generic(width, a.data_ptr<float>(), lda, rows, out, m, k, count);
      };
      const at::Tensor c = at::empty({m, n});
      product(b.data_ptr<float>(), c.data_ptr<float>(), n);
      CHECK((c.to(at::kDouble) - reference).abs().max().item<double>() / scale < bound);
      // Column j against B's row j alone, which is a ragged row of one: the same bits.
      bool alike = true;
      for (int j = 0; j < n; ++j) {
        const at::Tensor alone = at::empty({m, 1});
        product(b[j].contiguous().data_ptr<float>(), alone.data_ptr<float>(), 1);
        alike = alike && at::equal(alone, c.narrow(1, j, 1));
      }
      CHECK(alike);
    }
  }
}

TEST_CASE("batched_matmul reads x's rows through their stride when it reads Wᵀ in place", "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;  // MEMSCOPE_CPU_KERNELS=0: the loop is off
  torch::manual_seed(37);
  const at::Tensor w_t = torch::randn({2, 3, 40, 64}).transpose(-1, -2);  // [2,3,64,40], column-major
  // x's rows 72 floats apart (a narrow of wider rows), and x's one row expanded to 4 (stride 0).
  for (const at::Tensor& x :
       {torch::randn({2, 3, 4, 72}).narrow(-1, 5, 64), torch::randn({2, 3, 1, 64}).expand({2, 3, 4, 64})}) {
    REQUIRE(batched_matmul_applies(x, w_t));
    CHECK(relative_error(batched_matmul(x, w_t), x, w_t) < 2e-6 * std::sqrt(65.0));
  }
}

TEST_CASE("batched_matmul reads expanded operands and sums their gradients back", "[model]") {
  if (!memscope::test::cpu_kernels_testable()) return;  // MEMSCOPE_CPU_KERNELS=0: the loop is off
  torch::manual_seed(13);
  // x's batch expanded by stride 0 (one matrix for every head), y a strided slice of a larger stack.
  const at::Tensor x0 = torch::randn({1, 4, 16}), y_base = torch::randn({5, 16, 24});
  const at::Tensor weight = torch::randn({5, 4, 12});
  auto run = [&](bool ours) {
    const at::Tensor x = x0.clone().requires_grad_(true), base = y_base.clone().requires_grad_(true);
    const at::Tensor xe = x.expand({5, 4, 16}), y = base.slice(-1, 3, 15);
    REQUIRE(batched_matmul_applies(xe, y));
    const at::Tensor out = ours ? batched_matmul(xe, y) : at::matmul(xe.to(at::kDouble), y.to(at::kDouble));
    const auto grads = torch::autograd::grad({(weight.to(out.dtype()) * out).sum()}, {x, base});
    return std::vector<at::Tensor>{out.detach(), grads[0], grads[1]};
  };
  const auto ours = run(true), reference = run(false);
  for (size_t i = 0; i < ours.size(); ++i) {
    INFO("0: values, 1: x's gradient (summed over the expanded batch), 2: the sliced y's");
    const double scale = std::max(1.0, reference[i].abs().max().item<double>());
    CHECK((ours[i].to(at::kDouble) - reference[i]).abs().max().item<double>() / scale < 1e-5);
  }
}
