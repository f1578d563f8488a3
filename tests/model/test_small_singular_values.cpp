// The probes' batched singular values (model/probe/small_singular_values.cpp, issue 20)
// against LAPACK's in float64, on the shapes the probes meet and the edge cases.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <limits>
#include <utility>
#include <vector>

#include "model/probe/small_singular_values.h"

using memscope::model::small_singular_values;

namespace {

// Largest |σ − σ_reference| relative to each matrix's largest σ.
double worst_error(const torch::Tensor& matrices) {
  const auto fast = small_singular_values(matrices);
  const auto reference = torch::linalg_svdvals(matrices.to(torch::kFloat64));
  REQUIRE(fast.sizes() == reference.sizes());
  REQUIRE(fast.scalar_type() == torch::kFloat32);
  const auto scale = reference.select(-1, 0).unsqueeze(-1).clamp_min(1e-30);
  return ((fast.to(torch::kFloat64) - reference).abs() / scale).max().item<double>();
}

}  // namespace

TEST_CASE("small singular values equal LAPACK's: square, wide, tall, partial groups", "[probe]") {
  torch::manual_seed(5);
  // The groups (16 or 8 lanes, used): 16; 16+16+8; 8; 16+16 (9); 8 (3); 8 (5); 8 (1); 8 (2); 16+8 (1);
  // 16; 16 (9); 16 (12). The last four make their Gram matrices a matrix at a time (beyond 32 KB
  // interleaved): square, wide as an MLP memory's W1, tall, and both sides off a multiple of four.
  for (auto shape : std::vector<std::vector<int64_t>>{{16, 16, 16},
                                                      {40, 16, 16},
                                                      {8, 16, 16},
                                                      {25, 16, 16},
                                                      {3, 8, 40},
                                                      {5, 40, 8},
                                                      {1, 1, 1},
                                                      {2, 2, 7},
                                                      {17, 64, 64},
                                                      {16, 16, 64},
                                                      {9, 64, 16},
                                                      {12, 30, 50},
                                                      {10, 64, 256},  // HOPE's self-modifying W1
                                                      {10, 256, 64},  // and W2
                                                      {3, 16, 200}}) {
    INFO("shape " << torch::IntArrayRef(shape));
    CHECK(worst_error(torch::randn(shape)) < 5e-7);  // measured ≤ 6e-8: the float output's own rounding
  }
  // Ill-conditioned and rank-deficient: singular values spread over six decades, and exact zeros.
  const auto u = std::get<0>(torch::linalg_qr(torch::randn({4, 16, 16}, torch::kFloat64)));
  const auto v = std::get<0>(torch::linalg_qr(torch::randn({4, 16, 16}, torch::kFloat64)));
  const auto spread = torch::logspace(0, -6, 16, 10, torch::kFloat64);
  const auto graded = torch::matmul(u * spread, v.transpose(-2, -1)).to(torch::kFloat32);
  CHECK(worst_error(graded) < 5e-7);
  // The same spread on 12 matrices 16×64 (orthonormal rows on the right), a matrix at a time.
  const auto wide =
      std::get<0>(torch::linalg_qr(torch::randn({4, 64, 16}, torch::kFloat64))).transpose(-2, -1);
  const auto graded_wide = torch::matmul(u * spread, wide).to(torch::kFloat32).repeat({3, 1, 1});
  CHECK(worst_error(graded_wide) < 5e-7);
  const auto low_rank = torch::matmul(torch::randn({6, 16, 3}), torch::randn({6, 3, 16}));
  CHECK(worst_error(low_rank) < 5e-7);
  // Clustered and repeated values, as NS outputs U have (σ near 1): orthogonal matrices, and
  // σ = 5 ×4, 1 ×6, 0 ×6; and scales far from 1 in one group.
  const auto orthogonal = u.to(torch::kFloat32);
  CHECK(worst_error(orthogonal) < 5e-7);
  const auto levels = torch::tensor({5., 5., 5., 5., 1., 1., 1., 1., 1., 1., 0., 0., 0., 0., 0., 0.}, torch::kFloat64);
  CHECK(worst_error(torch::matmul(u * levels, v.transpose(-2, -1)).to(torch::kFloat32)) < 5e-7);
  auto scaled = torch::randn({16, 16, 16});
  scaled[2] *= 1e-20;
  scaled[5] *= 1e20;
  CHECK(worst_error(scaled) < 5e-7);
}

TEST_CASE("small singular values: zero and non-finite matrices, and sizes beyond the batched path", "[probe]") {
  auto m = torch::randn({3, 16, 16});
  m[1].zero_();
  m[2][4][5] = std::nan("");
  const auto sigma = small_singular_values(m);
  CHECK(sigma[0].min().item<float>() > 0);
  CHECK(sigma[1].abs().max().item<float>() == 0);
  CHECK(torch::isnan(sigma[2]).all().item<bool>());  // NaN in, NaN out, nothing else disturbed
  CHECK(torch::allclose(sigma[0], torch::linalg_svdvals(m[0]), 1e-5, 1e-5));
  auto wide = torch::randn({9, 16, 64});  // Gram matrices a matrix at a time
  wide[3].zero_();
  wide[7][2][60] = std::numeric_limits<float>::infinity();
  const auto wide_sigma = small_singular_values(wide);
  CHECK(wide_sigma[3].abs().max().item<float>() == 0);
  CHECK(torch::isnan(wide_sigma[7]).all().item<bool>());
  CHECK(torch::allclose(wide_sigma[8], torch::linalg_svdvals(wide[8]), 1e-5, 1e-5));
  CHECK(small_singular_values(torch::randn({0, 16, 16})).sizes() == torch::IntArrayRef({0, 16}));
  CHECK(small_singular_values(torch::randn({3, 0, 16})).sizes() == torch::IntArrayRef({3, 0}));
  const auto big = torch::randn({2, 80, 70});
  CHECK(torch::equal(small_singular_values(big), torch::linalg_svdvals(big)));
}

TEST_CASE("small singular values where the matrices lie: wide and tall mixed give the stack's bits",
          "[probe]") {
  using memscope::model::HostMatrix;
  using memscope::model::NonFinite;
  using memscope::model::small_singular_values_into;
  torch::manual_seed(21);
  // Twenty wide and twenty tall matrices alternating, so that the groups (16 + 16 + 8) mix them:
  // 64 × 256 (Gram matrices a matrix at a time) and 12 × 20 (interleaved). One tall matrix has a
  // NaN, one wide matrix an Inf.
  for (const auto& [k, n] : std::vector<std::pair<int64_t, int64_t>>{{64, 256}, {12, 20}}) {
    INFO(k << "×" << n);
    at::Tensor wide = torch::randn({20, k, n}), tall = torch::randn({20, n, k});
    tall[3][n - 1][0] = std::nan("");
    wide[8][0][n - 1] = std::numeric_limits<float>::infinity();
    std::vector<HostMatrix> matrices;
    std::vector<at::Tensor> as_wide;  // the stack small_singular_values takes: tall ones transposed
    for (int64_t i = 0; i < 40; ++i) {
      const at::Tensor& x = i % 2 == 0 ? wide[i / 2] : tall[i / 2];
      matrices.push_back({x.data_ptr<float>(), x.size(0), x.size(1)});
      as_wide.push_back(i % 2 == 0 ? x : x.t().contiguous());
    }
    const at::Tensor stack = torch::stack(as_wide);
    const at::Tensor got = torch::empty({40, k}), zeroed = torch::empty({40, k});
    small_singular_values_into(matrices, NonFinite::Nan, got.data_ptr<float>());
    small_singular_values_into(matrices, NonFinite::ReadAsZero, zeroed.data_ptr<float>());
    // NaN where the matrix was not finite; every bit of the rest the stack's.
    const at::Tensor expect = small_singular_values(stack);
    CHECK(torch::isnan(got[7]).all().item<bool>());   // tall[3]
    CHECK(torch::isnan(got[16]).all().item<bool>());  // wide[8]
    CHECK(torch::allclose(got, expect, 0.0, 0.0, /*equal_nan=*/true));
    CHECK(torch::equal(zeroed, small_singular_values(torch::nan_to_num(stack, 0.0, 0.0, 0.0))));
  }
  // Groups with padding lanes (11 matrices in a group of 16 lanes, 3 in one of 8), wide and tall
  // alternating, interleaved at 12×20: a padding lane reads the first matrix's way.
  for (const int64_t count : {11, 3}) {
    INFO(count << " matrices");
    const at::Tensor wide = torch::randn({count, 12, 20}), tall = torch::randn({count, 20, 12});
    std::vector<HostMatrix> matrices;
    std::vector<at::Tensor> as_wide;
    for (int64_t i = 0; i < count; ++i) {
      const at::Tensor& x = i % 2 == 0 ? wide[i] : tall[i];
      matrices.push_back({x.data_ptr<float>(), x.size(0), x.size(1)});
      as_wide.push_back(i % 2 == 0 ? x : x.t().contiguous());
    }
    const at::Tensor got = torch::empty({count, 12});
    small_singular_values_into(matrices, NonFinite::Nan, got.data_ptr<float>());
    CHECK(torch::equal(got, small_singular_values(torch::stack(as_wide))));
  }
  // Sides that differ are refused, not measured.
  const at::Tensor a = torch::randn({16, 64}), b = torch::randn({16, 60});
  const at::Tensor out = torch::empty({2, 16});
  CHECK_THROWS_WITH(small_singular_values_into({{a.data_ptr<float>(), 16, 64}, {b.data_ptr<float>(), 16, 60}},
                                               NonFinite::Nan, out.data_ptr<float>()),
                    Catch::Contains("16×60 matrix among 16×64"));
}
