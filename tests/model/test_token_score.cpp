// A CPU frame's prediction and loss on the host (model/probe/token_score.h) against the ATen calls
// the probes made before, and still make for a GPU model: at::argmax, and −log_softmax in double
// read back through the probes' float transfer.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/probe/token_score.h"

using memscope::model::score_token;

namespace {

void check_against_aten(const torch::Tensor& logits, int64_t target) {
  const auto s = score_token(logits, target);
  CHECK(s.predicted == logits.argmax().item<int64_t>());
  const double aten = static_cast<double>(static_cast<float>((-torch::log_softmax(logits.to(torch::kDouble), 0)[target]).item<double>()));
  if (std::isnan(aten)) {
    CHECK(std::isnan(s.loss));
  } else {
    CHECK(s.loss == aten);  // the same float: both round a double log-softmax
  }
}

}  // namespace

TEST_CASE("token score: argmax and loss equal ATen's", "[probe]") {
  torch::manual_seed(3);
  for (int64_t vocab : {1, 2, 7, 52, 256, 50000})
    for (double scale : {1e-3, 1.0, 30.0}) {
      INFO("vocab " << vocab << " scale " << scale);
      const auto logits = torch::randn({vocab}) * scale;
      check_against_aten(logits, 0);
      check_against_aten(logits, vocab - 1);
      check_against_aten(logits, logits.argmax().item<int64_t>());
    }
  // Ties: the first maximum.
  check_against_aten(torch::tensor({1.0f, 3.0f, 3.0f, -2.0f}), 2);
  // No target: the prediction only.
  const auto none = score_token(torch::tensor({0.5f, 2.0f}), -1);
  CHECK(none.predicted == 1);
  CHECK(none.loss == 0);
}

TEST_CASE("token score: NaN and infinite logits as ATen has them", "[probe]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  check_against_aten(torch::tensor({1.0f, nan, 5.0f, nan}), 2);  // the first NaN wins; the loss is NaN
  check_against_aten(torch::tensor({1.0f, inf, 5.0f}), 0);       // exp(Inf − Inf): NaN
  check_against_aten(torch::tensor({1.0f, -inf, 5.0f}), 2);      // a logit of −Inf has probability 0
  check_against_aten(torch::tensor({1.0f, -inf, 5.0f}), 1);      // and its loss is +Inf
  CHECK_THROWS(score_token(torch::randn({4}), 4));
  CHECK_THROWS(score_token(torch::randn({2, 4}), 0));
}
