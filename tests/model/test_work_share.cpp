// WorkShare (model/util/work_share.h): a SideThread job's loop whose items the thread waiting for
// the job takes part in; every item once, failures carried back, and the same bits whoever ran it.
#include <torch/torch.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "model/probe/small_singular_values.h"
#include "model/util/side_thread.h"
#include "model/util/work_share.h"

using namespace memscope::model;

namespace {

// Waits until `flag` is set, at most 10 s; whether it was.
bool await(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!flag.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  return flag.load();
}

}  // namespace

TEST_CASE("work share: a loop with no work share runs here, in order", "[work_share]") {
  REQUIRE(current_work_share() == nullptr);
  std::vector<int64_t> order;
  for_each_shared(5, [&](int64_t i) { order.push_back(i); });
  CHECK(order == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("work share: the thread waiting for a side job runs items of its shared loop", "[work_share]") {
  SideThread side;
  const auto waiter = std::this_thread::get_id();
  std::atomic<bool> helped{false};
  std::mutex mutex;
  std::multiset<int64_t> ran;
  bool side_started = false, first_waited = false, shares = false;
  side.run([&] {  // no Catch2 assertions off the test's thread: they are not thread-safe
    shares = current_work_share() != nullptr;
    for_each_shared(16, [&](int64_t i) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        ran.insert(i);
      }
      if (std::this_thread::get_id() == waiter) {
        helped = true;
      } else if (!side_started) {
        side_started = true;  // the side thread's first item holds it until the waiter has taken one
        first_waited = await(helped);
      }
    });
  });
  side.wait();
  CHECK(shares);
  CHECK(helped);  // the side thread's first item, if it claimed one, waited for that
  if (side_started) CHECK(first_waited);
  CHECK(ran.size() == 16);
  for (int64_t i = 0; i < 16; ++i) CHECK(ran.count(i) == 1);
}

TEST_CASE("work share: a failure on either thread reaches the waiter, after every item ran", "[work_share]") {
  // Which thread fails: the waiter, the side thread, or both (the side thread's own is reported).
  for (const int failing : {1, 2, 3}) {
    INFO("failing " << failing);
    SideThread side;
    const auto waiter = std::this_thread::get_id();
    std::atomic<bool> helped{false};
    std::atomic<int> ran{0};
    bool side_started = false;
    side.run([&] {
      for_each_shared(8, [&](int64_t) {
        ++ran;
        if (std::this_thread::get_id() == waiter) {
          helped = true;
          if (failing & 1) throw std::runtime_error("failed on the waiter");
          return;
        }
        if (!side_started) {
          side_started = true;  // the side thread's first item holds it until the waiter has taken one
          await(helped);
        }
        if (failing & 2) throw std::runtime_error("failed on the side thread");
      });
    });
    bool threw = false;
    try {
      side.wait();
    } catch (const std::runtime_error& e) {
      threw = true;
      const std::string message = e.what();
      // The side thread's failure when it failed and ran an item; else the waiter's.
      if (failing == 1 || !side_started) {
        CHECK(message == (failing & 1 ? "failed on the waiter" : "failed on the side thread"));
      } else {
        CHECK(message == "failed on the side thread");
      }
    }
    CHECK(threw == (failing == 1 || failing == 3 || side_started));
    CHECK(ran == 8);
    CHECK(side.items_helped() > 0);
  }
}

TEST_CASE("work share: a loop inside an item runs where it is", "[work_share]") {
  SideThread side;
  std::mutex mutex;
  std::vector<int64_t> inner;
  std::atomic<bool> nested_shared{false};
  side.run([&] {
    for_each_shared(2, [&](int64_t) {
      nested_shared = nested_shared || current_work_share() != nullptr;
      for_each_shared(3, [&](int64_t j) {
        std::lock_guard<std::mutex> lock(mutex);
        inner.push_back(j);
      });
    });
  });
  side.wait();
  CHECK_FALSE(nested_shared);
  CHECK(inner.size() == 6);
}

TEST_CASE("work share: shared spectra are the bits of the same spectra computed alone", "[work_share]") {
  torch::manual_seed(3);
  const at::Tensor stack = torch::randn({80, 64, 256});  // groups of 16 lanes, 64 × 64 Gram matrices
  const at::Tensor alone = small_singular_values(stack);
  SideThread side;
  // Until the waiting thread has run a group (it nearly always does at once; a few tries for a
  // busy machine), each time after filling its scratch with another stack's, so that a group
  // reading stale scratch would not come out right by chance.
  for (int attempt = 0; attempt < 5 && side.items_helped() == 0; ++attempt) {
    small_singular_values(torch::randn({16, 64, 256}));
    at::Tensor shared;
    side.run([&] { shared = small_singular_values(stack); });
    side.wait();
    CHECK(torch::equal(alone, shared));
  }
  CHECK(side.items_helped() > 0);
}
