// Data-parallel collectives (model/dist/, issue 21), on a real c10d TCPStore and ProcessGroupGloo:
// two ranks as two threads of this process, joined through a store on a free loopback port.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <functional>
#include <future>
#include <mutex>

#include "model/dist/data_parallel.h"
#include "model/dist/launch_env.h"
#include "model/dist/rendezvous_store.h"
#include "model/util/errors.h"

namespace {

using memscope::model::DataParallel;
using memscope::model::LaunchEnv;
using memscope::model::parse_launch_env;
using memscope::model::RendezvousStore;
using memscope::model::UserError;

// Runs `body(group)` on two ranks at once and returns what each threw ("" when nothing).
std::vector<std::string> on_two_ranks(const std::function<void(DataParallel&)>& body) {
  const RendezvousStore store;
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      LaunchEnv env;
      env.rank = r;
      env.world_size = 2;
      env.master_port = store.port();
      env.agent_store = true;
      memscope::model::DataParallelOptions options;
      options.timeout = std::chrono::seconds(20);
      options.bucket_bytes = 64;  // several buckets even for these small tensors
      try {
        DataParallel group(env, options);
        body(group);
      } catch (const std::exception& e) {
        return std::string(e.what());
      }
      return std::string();
    }));
  std::vector<std::string> errors;
  for (auto& r : ranks) errors.push_back(r.get());
  return errors;
}

}  // namespace

TEST_CASE("launcher variables: a plain run, a valid launch and each bad setting", "[model][dist]") {
  CHECK_FALSE(parse_launch_env({}).has_value());
  const auto ok = parse_launch_env(
      {{"WORLD_SIZE", "4"}, {"RANK", "3"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}});
  REQUIRE(ok.has_value());
  CHECK(ok->rank == 3);
  CHECK(ok->world_size == 4);
  CHECK(ok->local_rank == 1);
  CHECK(ok->master_addr == "node7");
  CHECK(ok->master_port == 29500);
  CHECK_FALSE(ok->agent_store);

  const std::map<std::string, std::string> base{
      {"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto with = [&](const std::string& key, const char* value) {
    auto env = base;
    if (value) env[key] = value;
    else env.erase(key);
    return env;
  };
  auto message = [](const std::map<std::string, std::string>& env) {
    try {
      parse_launch_env(env);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message(with("WORLD_SIZE", "0")) == "WORLD_SIZE=0 is out of range: the number of ranks must be in [1, 1048576]");
  CHECK(message(with("RANK", "2")) == "RANK=2 is not below WORLD_SIZE=2 (ranks count from 0)");
  CHECK(message(with("RANK", "-1")).find("RANK=-1 is out of range") == 0);
  CHECK(message(with("RANK", nullptr)).find("RANK is not set") == 0);
  CHECK(message(with("MASTER_PORT", "70000")).find("MASTER_PORT=70000 is out of range") == 0);
  CHECK(message(with("MASTER_PORT", "29x")).find("MASTER_PORT='29x' is not an integer") == 0);
  CHECK(message(with("MASTER_ADDR", "")).find("MASTER_ADDR is not set") == 0);
  CHECK(parse_launch_env(with("TORCHELASTIC_USE_AGENT_STORE", "True"))->agent_store);
}

TEST_CASE("data-parallel collectives: shards, sums, the stop flag, averaged gradients, broadcast", "[model][dist]") {
  if (!memscope::model::gloo_available()) {
    WARN("skipped: this LibTorch has no c10d Gloo, so training across processes is unavailable");
    return;
  }
  const auto errors = on_two_ranks([](DataParallel& group) {
    const int r = group.rank();
    CHECK(group.world_size() == 2);
    CHECK(group.shard(16) == std::make_pair<int64_t, int64_t>(8 * r, 8 * r + 8));
    CHECK_THROWS_WITH(group.shard(15), Catch::Contains("train.batch=15 is not a multiple of the world size 2"));

    const at::Tensor totals = torch::tensor({1.5 + r, 10.0 * r}, torch::kDouble);
    group.sum(totals);
    CHECK(totals[0].item<double>() == 4.0);
    CHECK(totals[1].item<double>() == 10.0);
    CHECK(group.any(r == 1));  // one rank's Ctrl+C stops both
    CHECK_FALSE(group.any(false));

    // Gradients in several buckets (64 bytes each), one of them left undefined on both ranks.
    std::vector<at::Tensor> parameters;
    for (int i = 0; i < 4; ++i) {
      at::Tensor p = torch::zeros({5, 3}, torch::requires_grad());
      if (i != 2) p.mutable_grad() = torch::full({5, 3}, static_cast<float>(i + 1) * (r == 0 ? 1.0f : 3.0f));
      parameters.push_back(p);
    }
    group.average_gradients(parameters);
    for (int i = 0; i < 4; ++i) {
      if (i == 2) {
        CHECK_FALSE(parameters[2].grad().defined());
        continue;
      }
      CHECK(torch::equal(parameters[static_cast<size_t>(i)].grad(), torch::full({5, 3}, 2.0f * (i + 1))));
    }
    CHECK(group.stats().bytes >= 3 * 15 * 4);

    std::vector<at::Tensor> mine{torch::full({4}, static_cast<float>(r + 7)), torch::full({2, 2}, static_cast<float>(r))};
    group.broadcast_from_rank0(mine);
    CHECK(torch::equal(mine[0], torch::full({4}, 7.0f)));
    CHECK(torch::equal(mine[1], torch::zeros({2, 2})));
    group.check_identical(mine, {"a", "b"});  // identical now: no error
  });
  CHECK(errors == std::vector<std::string>{"", ""});
}

TEST_CASE("parameters that differ across ranks are a named error on every rank", "[model][dist]") {
  if (!memscope::model::gloo_available()) {
    WARN("skipped: this LibTorch has no c10d Gloo, so training across processes is unavailable");
    return;
  }
  const auto errors = on_two_ranks([](DataParallel& group) {
    group.set_step(42);
    at::Tensor same = torch::ones({3});
    at::Tensor differs = torch::ones({3});
    if (group.rank() == 1) differs[1] = 1.0f + 1e-7f;  // one ulp-sized drift is still a difference
    group.check_identical({same, differs}, {"block0.w_k", "block0.w_v"});
  });
  for (int r = 0; r < 2; ++r) {
    INFO(errors[static_cast<size_t>(r)]);
    CHECK(errors[static_cast<size_t>(r)] == "rank " + std::to_string(r) +
                                                " of 2, step 42: parameters differ across ranks: 'block0.w_v' on rank 1 "
                                                "is not rank 0's (1 of 2 tensors differ; a rank ran other code, data or "
                                                "settings)");
  }
}

TEST_CASE("gradients all-reduced during the backward equal the mean of the ranks' gradients", "[model][dist]") {
  if (!memscope::model::gloo_available()) {
    WARN("skipped: this LibTorch has no c10d Gloo, so training across processes is unavailable");
    return;
  }
  // Each rank differentiates a small MLP on its own input; with 64-byte buckets the hooks start
  // several all-reduces while the backward still runs. Every rank also computes both ranks'
  // gradients itself, so the mean has an independent reference.
  const auto errors = on_two_ranks([](DataParallel& group) {
    auto make = [] {
      std::vector<at::Tensor> p{torch::randn({6, 4}), torch::randn({6}), torch::randn({3, 6}), torch::randn({3})};
      for (auto& t : p) t.set_requires_grad(true);
      return p;
    };
    auto loss = [](const std::vector<at::Tensor>& p, int rank) {
      const at::Tensor x = torch::linspace(-1.0, 1.0 + rank, 20).reshape({5, 4});
      return torch::tanh(x.matmul(p[0].t()) + p[1]).matmul(p[2].t()).add(p[3]).pow(2).sum();
    };
    std::vector<at::Tensor> reference_parameters;
    std::vector<at::Tensor> parameters;
    {
      static std::mutex seed_lock;  // torch's default generator is shared by the two threads
      std::lock_guard<std::mutex> lock(seed_lock);
      torch::manual_seed(5);
      parameters = make();
      torch::manual_seed(5);
      reference_parameters = make();
    }
    loss(reference_parameters, 0).backward();
    loss(reference_parameters, 1).backward();  // .grad now holds the sum of both ranks'

    group.arm_gradient_overlap(parameters);
    loss(parameters, group.rank()).backward();
    group.average_gradients(parameters);
    CHECK(group.stats().calls >= 3);  // several buckets, started from the hooks
    for (size_t i = 0; i < parameters.size(); ++i)
      CHECK(torch::allclose(parameters[i].grad(), reference_parameters[i].grad() / 2, 1e-6, 1e-6));

    // A second step re-arms the same hooks; without arming, the plain path gives the same.
    for (auto& p : parameters) p.mutable_grad() = at::Tensor();
    group.arm_gradient_overlap(parameters);
    loss(parameters, group.rank()).backward();
    group.average_gradients(parameters);
    const auto overlapped = parameters[0].grad().clone();
    for (auto& p : parameters) p.mutable_grad() = at::Tensor();
    loss(parameters, group.rank()).backward();
    group.average_gradients(parameters);
    CHECK(torch::equal(parameters[0].grad(), overlapped));
  });
  CHECK(errors == std::vector<std::string>{"", ""});
}
