// TensorSlab (model/util/tensor_slab.h): the pieces the fused steps' records are carved into are
// contiguous tensors of the asked sizes, side by side in one storage that they keep alive, and
// they behave as tensors to ATen (what the probes do with them).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "model/util/tensor_slab.h"

using namespace memscope::model;

TEST_CASE("a tensor slab's pieces are contiguous, disjoint views of one storage", "[model]") {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> pieces;
  {
    TensorSlab slab(2 * 3 * 4 + 2 * 3 + 5, torch::TensorOptions().dtype(at::kFloat));
    pieces.push_back(slab.take({2, 3, 4}));
    pieces.push_back(slab.take({2, 3}));
    pieces.push_back(slab.take({5}));
    CHECK_THROWS_WITH(slab.take({1}), Catch::Contains("1 elements asked for, 0 left"));
  }  // the slab object is gone; its storage lives on in the pieces
  CHECK(pieces[0].sizes() == at::IntArrayRef({2, 3, 4}));
  CHECK(pieces[1].sizes() == at::IntArrayRef({2, 3}));
  CHECK(pieces[2].sizes() == at::IntArrayRef({5}));
  for (const auto& p : pieces) {
    CHECK(p.is_contiguous());
    CHECK(p.scalar_type() == at::kFloat);
    CHECK(p.is_cpu());
    CHECK(p.storage().is_alias_of(pieces[0].storage()));
  }
  CHECK(pieces[1].storage_offset() == 24);
  CHECK(pieces[2].storage_offset() == 30);
  // Written through their pointers (as the fused steps fill them), read back through ATen.
  for (size_t i = 0; i < pieces.size(); ++i) {
    float* data = pieces[i].data_ptr<float>();
    for (int64_t j = 0; j < pieces[i].numel(); ++j) data[j] = static_cast<float>(100 * i + j);
  }
  CHECK(pieces[0][1][2][3].item<float>() == 23.0f);
  CHECK(pieces[1].sum().item<float>() == 100.0f * 6 + 15.0f);
  CHECK(at::equal(pieces[2], at::arange(200, 205, at::kFloat)));
  CHECK(at::stack({pieces[1].select(0, 0), pieces[1].select(0, 1)}, -1).sizes() == at::IntArrayRef({3, 2}));
  // ATen ops on a piece make ordinary tensors, and a clone owns its own storage.
  const at::Tensor copy = pieces[0].clone();
  pieces[0].zero_();
  CHECK(copy.sum().item<float>() == 276.0f);
  CHECK(pieces[1].sum().item<float>() == 615.0f);  // the neighbour untouched by zero_()
}
