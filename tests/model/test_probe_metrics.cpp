// SPEC §8 probes against independent computations.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "model/memory/newton_schulz.h"
#include "model/probe/matrix_metrics.h"
#include "model/probe/spike_detector.h"

using namespace memscope::model;

namespace {
// A random orthogonal n × n matrix (QR of a Gaussian).
torch::Tensor random_orthogonal(int64_t n) { return std::get<0>(at::linalg_qr(torch::randn({n, n}, torch::kFloat64))); }
}  // namespace

TEST_CASE("erank: identity is n, rank one is 1, zero is 0", "[model]") {
  CHECK(effective_rank(torch::eye(7, torch::kFloat64)).item<double>() == Approx(7.0).epsilon(1e-12));
  auto rank1 = torch::outer(torch::randn({9}, torch::kFloat64), torch::randn({5}, torch::kFloat64));
  CHECK(effective_rank(rank1).item<double>() == Approx(1.0).epsilon(1e-9));
  CHECK(effective_rank(torch::zeros({4, 4}, torch::kFloat64)).item<double>() == 0.0);
}

TEST_CASE("erank of a known spectrum is exp of its normalised entropy", "[model]") {
  torch::manual_seed(3);
  const std::vector<double> spectrum{4.0, 2.0, 1.0, 0.5, 0.0, 0.0};
  auto m = torch::matmul(torch::matmul(random_orthogonal(6), torch::diag(torch::tensor(spectrum, torch::kFloat64))),
                         random_orthogonal(6).t());
  double total = 0.0, entropy = 0.0;
  for (double s : spectrum) total += s;
  for (double s : spectrum)
    if (s > 0) entropy -= (s / total) * std::log(s / total);
  CHECK(effective_rank(m).item<double>() == Approx(std::exp(entropy)).epsilon(1e-9));
}

TEST_CASE("erank is batched over leading dimensions", "[model]") {
  auto batch = torch::stack({torch::eye(3, torch::kFloat64), torch::zeros({3, 3}, torch::kFloat64)});
  auto e = effective_rank(batch);
  CHECK(e[0].item<double>() == Approx(3.0));
  CHECK(e[1].item<double>() == 0.0);
}

TEST_CASE("NS error: an orthogonal U scores ~0 with unit singular values", "[model]") {
  torch::manual_seed(4);
  auto q = random_orthogonal(8);
  for (auto u : {q, q.slice(1, 0, 5), q.slice(0, 0, 5)}) {  // square, tall, wide
    auto e = orthogonality_error(u);
    CHECK(e.error.item<double>() < 1e-12);
    CHECK(e.sigma_min.item<double>() == Approx(1.0));
    CHECK(e.sigma_max.item<double>() == Approx(1.0));
  }
}

TEST_CASE("NS error of a scaled orthogonal matrix matches the formula", "[model]") {
  // U = s·Q (r = n): UᵀU − I = (s² − 1) I, so ‖·‖_F / √n = |s² − 1|.
  auto u = 1.2 * random_orthogonal(6);
  auto e = orthogonality_error(u);
  CHECK(e.error.item<double>() == Approx(std::abs(1.44 - 1.0)).epsilon(1e-9));
  CHECK(e.sigma_min.item<double>() == Approx(1.2));
}

TEST_CASE("NS error of the quintic NS output is small but not zero, as SPEC §6 says", "[model]") {
  torch::manual_seed(5);
  auto e = orthogonality_error(newton_schulz(torch::randn({16, 32}, torch::kFloat64)));
  CHECK(e.error.item<double>() > 1e-3);
  CHECK(e.error.item<double>() < 0.5);
  CHECK(e.sigma_min.item<double>() >= 0.6);
  CHECK(e.sigma_max.item<double>() <= 1.3);
}

TEST_CASE("spike detector finds a planted spike at its step", "[model]") {
  SpikeDetector detector;
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<Spike> spikes;
  for (int step = 0; step < 2000; ++step) {
    const double loss = 2.0 * std::exp(-step / 800.0) + noise(rng) + (step == 1234 ? 3.0 : 0.0);
    if (auto s = detector.observe(step, loss)) spikes.push_back(*s);
  }
  REQUIRE(spikes.size() == 1);
  CHECK(spikes[0].step == 1234);
  CHECK(spikes[0].z > 6.0);
}

TEST_CASE("spike detector finds each of repeated spikes, and a new level stops firing within a few steps", "[model]") {
  // The same planted outlier every 40 steps: each is found (folded in at full weight, the first
  // would inflate the variance for hundreds of steps and hide the rest).
  SpikeDetector detector;
  std::mt19937 rng(13);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::vector<int64_t> found;
  for (int step = 0; step < 600; ++step) {
    const double loss = 0.5 + noise(rng) + (step >= 100 && step % 40 == 0 ? 3.0 : 0.0);
    if (auto s = detector.observe(step, loss)) found.push_back(s->step);
  }
  CHECK(found == std::vector<int64_t>{120, 160, 200, 240, 280, 320, 360, 400, 440, 480, 520, 560});
  // A jump to a new level that stays: from its second step it is learnt at full weight, so it
  // fires a few times while the variance catches up (as it did before the clipping), then never.
  SpikeDetector level;
  int fired = 0, late = 0;
  for (int step = 0; step < 600; ++step) {
    const bool spike = level.observe(step, (step < 300 ? 0.5 : 4.0) + noise(rng)).has_value();
    fired += spike;
    late += spike && step >= 320;
  }
  CHECK(fired >= 1);
  CHECK(fired <= 6);
  CHECK(late == 0);
}

TEST_CASE("spike detector gives no false positive on a smooth series or NaN", "[model]") {
  SpikeDetector detector;
  std::mt19937 rng(12);
  std::normal_distribution<double> noise(0.0, 0.02);
  int fired = 0;
  for (int step = 0; step < 5000; ++step) {
    const double value = 1.0 + 0.3 * std::sin(step / 150.0) + noise(rng);
    fired += detector.observe(step, value).has_value();
  }
  fired += detector.observe(5000, std::nan("")).has_value();
  CHECK(fired == 0);
}
