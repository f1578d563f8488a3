// OverlapGauge (model/engine/overlap_gauge.h): when the side thread is late for half a window of
// overlapped tokens the probes are measured in line for a back-off that doubles while the overlap
// keeps losing and halves with each window that pays; a single late token is a hiccup.
#include <catch2/catch.hpp>
#include <cstdint>

#include "model/engine/overlap_gauge.h"

using memscope::model::OverlapGauge;

namespace {

constexpr double kJob = 50e-6;  // the side thread's job: 50 µs of probes
constexpr double kPaid = 0.0;   // the engine did not wait: the probes were done first
constexpr double kLate = 2e-3;  // it waited 2 ms: the side thread was not running
constexpr int64_t kHalf = OverlapGauge::kWindow / 2;

// Feeds `late` late tokens and the rest of `n` paid ones; every token must be overlapped.
void feed(OverlapGauge& gauge, int64_t n, int64_t late) {
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(gauge.overlap_next());
    gauge.overlapped(i < late ? kLate : kPaid, kJob);
  }
}

// Counts the probed tokens measured in line until the gauge overlaps one again.
int64_t in_line_run(OverlapGauge& gauge) {
  int64_t n = 0;
  while (!gauge.overlap_next()) ++n;
  return n;
}

}  // namespace

TEST_CASE("overlap gauge: tokens that paid, and one late token in a window, never back off", "[engine]") {
  OverlapGauge gauge;
  feed(gauge, 10 * OverlapGauge::kWindow, 0);
  for (int w = 0; w < 10; ++w) feed(gauge, OverlapGauge::kWindow, 1);
  // A wait shorter than the job is no loss: the probes would have cost the job's time in line.
  for (int i = 0; i < 3 * OverlapGauge::kWindow; ++i) {
    REQUIRE(gauge.overlap_next());
    gauge.overlapped(0.9 * kJob, kJob);
  }
  CHECK(gauge.back_offs() == 0);
  CHECK(gauge.tokens_in_line() == 0);
  CHECK_FALSE(gauge.backing_off());
}

TEST_CASE("overlap gauge: half a window late backs off, doubling while retries lose, halving as windows pay",
          "[engine]") {
  OverlapGauge gauge;
  feed(gauge, OverlapGauge::kWindow - kHalf, 0);  // paid first, then late: the order does not matter
  for (int64_t i = 0; i < kHalf; ++i) {
    REQUIRE(gauge.overlap_next());
    gauge.overlapped(kLate, kJob);
  }
  CHECK(gauge.backing_off());
  CHECK(in_line_run(gauge) == OverlapGauge::kFirstBackOff);
  // The token that ended the back-off is overlapped: the retry's first. Two of three late: losing.
  gauge.overlapped(kLate, kJob);
  feed(gauge, OverlapGauge::kRetryWindow - 1, 1);
  CHECK(in_line_run(gauge) == 2 * OverlapGauge::kFirstBackOff);
  gauge.overlapped(kLate, kJob);
  feed(gauge, OverlapGauge::kRetryWindow - 1, 2);
  CHECK(in_line_run(gauge) == 4 * OverlapGauge::kFirstBackOff);
  CHECK(gauge.back_offs() == 3);
  CHECK(gauge.tokens_in_line() == 7 * OverlapGauge::kFirstBackOff);
  // A retry that pays, then a whole window that pays: the next back-off is halved, from 8× to 4×.
  gauge.overlapped(kPaid, kJob);
  feed(gauge, OverlapGauge::kRetryWindow - 1, 0);
  feed(gauge, OverlapGauge::kWindow, 0);
  feed(gauge, OverlapGauge::kWindow, kHalf);
  CHECK(in_line_run(gauge) == 4 * OverlapGauge::kFirstBackOff);
}

TEST_CASE(
    "overlap gauge: back-offs stop doubling at the most, and a gauge that does not adapt never starts one",
    "[engine]") {
  OverlapGauge gauge;
  feed(gauge, OverlapGauge::kWindow, OverlapGauge::kWindow);
  int64_t last = in_line_run(gauge);
  for (int i = 0; i < 12; ++i) {
    gauge.overlapped(kLate, kJob);
    feed(gauge, OverlapGauge::kRetryWindow - 1, OverlapGauge::kRetryWindow - 1);
    last = in_line_run(gauge);
  }
  CHECK(last == OverlapGauge::kMaxBackOff);

  OverlapGauge fixed;
  fixed.set_adapts(false);
  feed(fixed, 10 * OverlapGauge::kWindow, 10 * OverlapGauge::kWindow);
  CHECK(fixed.back_offs() == 0);
  // Turned off during a back-off, the back-off runs out and no other follows.
  OverlapGauge turned;
  feed(turned, OverlapGauge::kWindow, OverlapGauge::kWindow);
  turned.set_adapts(false);
  CHECK(in_line_run(turned) == OverlapGauge::kFirstBackOff);
  feed(turned, 10 * OverlapGauge::kWindow, 10 * OverlapGauge::kWindow);
  CHECK(turned.tokens_in_line() == OverlapGauge::kFirstBackOff);
}
