// running_products (model/memory/linear_scan.h), the running product a GPU's training pass takes
// instead of at::cumprod, whose backward reads the device back on the host (issue 23): against
// at::cumprod in float64, values and gradients, with zeros and negative factors, and its backward
// watched for host reads (model/util/host_reads.h).
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "model/memory/linear_scan.h"
#include "model/util/cpu_kernels.h"
#include "model/util/host_reads.h"

using namespace memscope::model;

namespace {

// Factors in (−1.5, 1.5), float64, with exact zeros: one alone, and two in a row.
at::Tensor factors(std::vector<int64_t> sizes, int64_t dim) {
  torch::manual_seed(static_cast<uint64_t>(sizes.back() * 31 + dim));
  at::Tensor x = torch::rand(sizes, torch::kFloat64) * 3.0 - 1.5;
  const int64_t n = x.size(dim);
  if (n > 3) {
    x.select(dim, 1).select(0, 0).zero_();
    x.select(dim, n - 2).select(0, 1).zero_();
    x.select(dim, n - 1).select(0, 1).zero_();
  }
  return x;
}

// Within 1e-12 of the largest magnitude: the two group the products differently.
bool close(const at::Tensor& got, const at::Tensor& want) {
  const double scale = std::max(1.0, want.abs().max().item<double>());
  return (got - want).abs().max().item<double>() <= 1e-12 * scale;
}

struct Products {
  at::Tensor y, grad;
};

Products products(const at::Tensor& x, int64_t dim, bool running) {
  const at::Tensor leaf = x.clone().requires_grad_();
  const at::Tensor y = running ? running_products(leaf, dim) : at::cumprod(leaf, dim);
  torch::manual_seed(5);
  (y * torch::randn_like(y)).sum().backward();
  return {y.detach(), leaf.grad()};
}

}  // namespace

TEST_CASE("running products: at::cumprod's values and gradients, zeros and negative factors included",
          "[memory][scan]") {
  for (const int64_t n : {1, 2, 3, 5, 8, 17, 64}) {
    for (const int64_t dim : {-1, -2, 1}) {
      CAPTURE(n, dim);
      std::vector<int64_t> sizes{3, 4, 6};
      sizes[static_cast<size_t>(dim < 0 ? 3 + dim : dim)] = n;
      const at::Tensor x = factors(sizes, dim);
      const Products want = products(x, dim, false), got = products(x, dim, true);
      CHECK(close(got.y, want.y));
      CHECK(close(got.grad, want.grad));
      CHECK(torch::equal(got.y.eq(0), want.y.eq(0)));  // zeros stay exact
    }
  }
}

TEST_CASE("running products: the backward reads nothing back, where at::cumprod's asks the host",
          "[memory][scan][host_reads]") {
  const at::Tensor x = factors({2, 3, 16}, -1);
  {
    HostReadWatch watch(c10::kCPU);
    products(x, -1, true);
    CHECK(watch.summary().empty());
  }
  HostReadWatch watch(c10::kCPU);
  products(x, -1, false);
  // Whether any factor is zero (item()), and, as some are, where (masked_select).
  const auto reads = watch.reads();
  INFO(watch.summary());
  CHECK(reads.count("autograd::engine::evaluate_function: CumprodBackward0 -> aten::_local_scalar_dense") ==
        1);
  for (const auto& [read, calls] : reads) CHECK_THAT(read, Catch::Matchers::Contains("CumprodBackward0 -> "));
}

TEST_CASE("running products: decay_products in a GPU's form equals the CPU's", "[memory][scan]") {
  const at::Tensor a = factors({2, 3, 12}, -1);
  const DecayProducts cpu = decay_products(a);
  const ScopedAtenForms gpu_forms;
  const DecayProducts gpu = decay_products(a);
  CHECK(close(gpu.within, cpu.within));
  CHECK(close(gpu.from_start, cpu.from_start));
}
