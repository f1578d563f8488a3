// A snapshot's shown matrices (model/probe/shown_matrices.cpp): the CPU float32 pass against the
// same values from ATen in float64 (adaptive_avg_pool2d, masked amin/amax, LAPACK's SVD), on the
// shapes the probes meet, windows that overlap, and matrices with NaN and Inf.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "model/probe/shown_matrices.h"
#include "model/util/side_thread.h"

using memscope::model::downsample_matrix;
using memscope::model::show_matrices;
using memscope::model::shown_shape;
using memscope::model::singular_values_together;

TEST_CASE("shown matrices: shapes keep the aspect and fit the largest side", "[probe]") {
  CHECK(shown_shape(64, 256, 64) == std::pair<int64_t, int64_t>{16, 64});
  CHECK(shown_shape(256, 64, 64) == std::pair<int64_t, int64_t>{64, 16});
  CHECK(shown_shape(50, 130, 64) == std::pair<int64_t, int64_t>{25, 64});
  CHECK(shown_shape(1, 500, 64) == std::pair<int64_t, int64_t>{1, 64});
  CHECK(shown_shape(64, 256, 0) == std::pair<int64_t, int64_t>{64, 256});
  CHECK(shown_shape(16, 64, 64) == std::pair<int64_t, int64_t>{16, 64});
}

TEST_CASE("shown matrices: downsampled snapshots are area means with the aspect kept", "[probe]") {
  const at::Tensor m = torch::arange(64 * 32, torch::kFloat).reshape({1, 64, 32});
  const at::Tensor small = downsample_matrix(m, 16);
  REQUIRE(small.sizes() == at::IntArrayRef({1, 16, 8}));
  CHECK(small[0][0][0].item<double>() == Approx(m[0].narrow(0, 0, 4).narrow(1, 0, 4).mean().item<double>()));
  CHECK(downsample_matrix(m, 0).sizes() == m.sizes());
}

TEST_CASE("shown matrices: on the CPU in float32 they equal ATen's in float64", "[probe]") {
  torch::manual_seed(11);
  const double inf = std::numeric_limits<double>::infinity();
  // HOPE's W1 and W2 (64×256 and 256×64, windows of 4×4), windows that overlap (50×130 → 25×64,
  // 130 columns in 64 windows of 3), and a stack of one.
  for (auto shape :
       std::vector<std::vector<int64_t>>{{10, 64, 256}, {10, 256, 64}, {3, 50, 130}, {1, 70, 20}}) {
    DYNAMIC_SECTION("shape " << shape[0] << "×" << shape[1] << "×" << shape[2]) {
      at::Tensor full = torch::randn(shape) * torch::linspace(0.1, 3.0, shape[0]).reshape({-1, 1, 1});
      if (shape[0] >= 3) {
        full[1][3][5] = std::nan("");
        full[1][7][2] = inf;
        full[1][9][9] = -inf;
        full[2].fill_(std::nan(""));  // no finite entry: the range is (+inf, −inf)
      }
      const auto fast = show_matrices(full, 64);
      const auto reference = show_matrices(full.to(torch::kFloat64), 64);
      REQUIRE(fast.summary.defined());
      REQUIRE(fast.shown.scalar_type() == torch::kFloat32);
      REQUIRE(fast.shown.sizes() == reference.shown.sizes());
      CHECK(torch::allclose(fast.shown.to(torch::kFloat64), reference.shown, 1e-6, 1e-6, /*equal_nan=*/true));

      const int64_t k = std::min(shape[1], shape[2]);
      REQUIRE(fast.summary.sizes() == at::IntArrayRef({shape[0], k + 4}));
      const at::Tensor range = fast.summary.narrow(1, k, 4),
                       range_reference = reference.summary.narrow(1, k, 4);
      CHECK(torch::equal(range, range_reference.to(torch::kFloat32)));
      // σ of the zeroed matrices, to LAPACK's in float64 within 1e-6 of each one's largest.
      const at::Tensor sigma = fast.summary.narrow(1, 0, k).to(torch::kFloat64);
      const at::Tensor sigma_reference =
          torch::linalg_svdvals(torch::nan_to_num(full.to(torch::kFloat64), 0.0, 0.0, 0.0));
      const at::Tensor scale = sigma_reference.select(1, 0).clamp_min(1e-30).unsqueeze(1);
      CHECK(((sigma - sigma_reference).abs() / scale).max().item<double>() < 1e-6);
    }
  }
}

TEST_CASE("shown matrices: those that fit are the full ones, with no summary", "[probe]") {
  const at::Tensor full = torch::randn({4, 16, 64});
  const auto view = show_matrices(full, 64);
  CHECK(view.shown.is_same(full));
  CHECK_FALSE(view.summary.defined());
  CHECK(show_matrices(torch::randn({2, 64, 256}), 0).shown.size(-1) == 256);
}

TEST_CASE("shown matrices: the singular values the caller knows are taken", "[probe]") {
  const at::Tensor full = torch::randn({2, 32, 128});
  const at::Tensor known = torch::tensor({{5.0f}, {7.0f}}).expand({2, 32}).contiguous();
  const auto view = show_matrices(full, 64, known);
  CHECK(torch::equal(view.summary.narrow(1, 0, 32), known));
}

TEST_CASE("shown matrices: spectra together equal each stack's own, tall ones and NaN included", "[probe]") {
  torch::manual_seed(12);
  const double inf = std::numeric_limits<double>::infinity();
  // Wide and tall stacks of one shape go in one call, the tall ones transposed; sides off a
  // multiple of the transposed copy's 16 × 16 tiles (37 × 20); a stack of another shape, and an
  // empty one, go apart.
  at::Tensor wide = torch::randn({3, 20, 37}), tall = torch::randn({4, 37, 20}),
             other = torch::randn({2, 8, 8});
  tall[1][36][19] = std::nan("");
  tall[2][0][5] = inf;
  wide[0][19][36] = -inf;
  const at::Tensor empty = torch::randn({0, 37, 20});
  for (const auto& stacks : std::vector<std::vector<at::Tensor>>{{wide, tall, empty}, {wide, other, tall}}) {
    const auto together = singular_values_together(stacks);
    REQUIRE(together.size() == stacks.size());
    for (size_t i = 0; i < stacks.size(); ++i) {
      INFO("stack " << i);
      const at::Tensor reference =
          torch::linalg_svdvals(torch::nan_to_num(stacks[i].to(torch::kFloat64), 0.0, 0.0, 0.0));
      REQUIRE(together[i].sizes() == reference.sizes());
      if (reference.numel() == 0) continue;
      const at::Tensor scale = reference.select(1, 0).clamp_min(1e-30).unsqueeze(1);
      CHECK(((together[i].to(torch::kFloat64) - reference).abs() / scale).max().item<double>() < 1e-6);
    }
  }
}

TEST_CASE(
    "shown matrices on the host: M and ΔM where they lie give the stacks' bits, a waiting thread's groups "
    "too",
    "[probe]") {
  using memscope::model::HostSnapshotMatrix;
  using memscope::model::show_host_matrices;
  torch::manual_seed(13);
  // A HOPE snapshot's layout: W1 [64, 256] and W2 [256, 64], ten each, M then ΔM = now − before,
  // so that the groups (16 + 16 + 8) mix M with ΔM and wide with tall. A NaN in one M, an Inf in
  // one `before` (an −Inf in its ΔM).
  const at::Tensor now1 = torch::randn({10, 64, 256}), now2 = torch::randn({10, 256, 64});
  const at::Tensor before1 = now1 + 0.01 * torch::randn_like(now1),
                   before2 = now2 + 0.01 * torch::randn_like(now2);
  now2[4][7][3] = std::nan("");
  before1[2][0][0] = std::numeric_limits<float>::infinity();
  const std::vector<at::Tensor> stacks{now1, now1 - before1, now2, now2 - before2};
  const std::vector<at::Tensor> sigma = singular_values_together(stacks);
  std::vector<memscope::model::ShownMatrices> expect;
  for (size_t s = 0; s < stacks.size(); ++s) expect.push_back(show_matrices(stacks[s], 64, sigma[s]));

  std::vector<HostSnapshotMatrix> matrices;
  const std::vector<std::pair<at::Tensor, at::Tensor>> sources{
      {now1, {}}, {now1, before1}, {now2, {}}, {now2, before2}};
  for (const auto& [now, before] : sources)
    for (int64_t i = 0; i < 10; ++i)
      matrices.push_back({now[i].data_ptr<float>(), before.defined() ? before[i].data_ptr<float>() : nullptr,
                          now.size(1), now.size(2)});
  // Writes into fresh outputs, in each stack's layout; then whether they hold the expected bits.
  auto shown_here = [&] {
    std::vector<memscope::model::ShownMatrices> got;
    std::vector<float*> shown, summary;
    for (const auto& e : expect) {
      got.push_back({torch::full_like(e.shown, -1.0f), torch::full_like(e.summary, -1.0f)});
      for (int64_t i = 0; i < 10; ++i) {
        shown.push_back(got.back().shown[i].data_ptr<float>());
        summary.push_back(got.back().summary[i].data_ptr<float>());
      }
    }
    show_host_matrices(matrices, 64, shown, summary);
    return got;
  };
  auto same = [&](const std::vector<memscope::model::ShownMatrices>& got) {
    bool all = true;
    for (size_t s = 0; s < expect.size(); ++s)
      all = all && torch::allclose(got[s].shown, expect[s].shown, 0.0, 0.0, /*equal_nan=*/true) &&
            torch::equal(got[s].summary, expect[s].summary);
    return all;
  };
  CHECK(same(shown_here()));
  CHECK(torch::isnan(expect[2].shown[4]).any().item<bool>());  // the NaN reached the shown copy
  CHECK(expect[1].summary[2][64 + 3].item<float>() == 1.0f);   // and the −Inf the ΔM's count
  // On a side job, with the waiting thread taking groups: the same bits. Tried until the waiter has
  // taken a group, at most 50 times: the job starts 1 ms late so that the waiter is waiting when
  // the groups are offered. Five tries without the delay missed 1 run in 27 with two busy loops
  // beside the test.
  memscope::model::SideThread side;
  for (int attempt = 0; attempt < 50 && side.items_helped() == 0; ++attempt) {
    std::vector<memscope::model::ShownMatrices> shared;
    side.run([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      shared = shown_here();
    });
    side.wait();
    CHECK(same(shared));
  }
  CHECK(side.items_helped() > 0);
  // A matrix that `largest` does not shrink is refused.
  const at::Tensor small = torch::randn({16, 64});
  CHECK_THROWS_WITH(
      show_host_matrices({{small.data_ptr<float>(), nullptr, 16, 64}}, 64, {nullptr}, {nullptr}),
      Catch::Contains("is not shrunk"));
}
