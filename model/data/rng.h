// The random numbers behind every task: xoshiro256** seeded through splitmix64. std::
// distributions are implementation-defined across standard libraries, and torch's generator
// differs between LibTorch 1.13 and 2.x; a task's batches must not change with either.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace memscope::model {

class Rng {
 public:
  explicit Rng(uint64_t seed);

  // The next 64 random bits.
  uint64_t next();
  // Uniform in [0, n) without modulo bias (rejection); throws std::invalid_argument when n < 1.
  int64_t uniform(int64_t n);
  // Uniform in [0, 1), 53 random bits.
  double uniform01();
  // k distinct integers of [0, n) in random order (a partial Fisher–Yates shuffle), 0 <= k <= n.
  std::vector<int64_t> choose(int64_t n, int64_t k);

  // The seed of stream `stream` of `seed` (one per batch row, one per training step). For a fixed
  // seed, distinct streams give distinct seeds: both mixing steps are bijections.
  static uint64_t mix(uint64_t seed, uint64_t stream);

  // The state as 64 lowercase hex digits, for checkpoints. set_state takes that text back and
  // throws UserError("rng state: …") when it is malformed or all zero (xoshiro's one dead state).
  std::string state() const;
  void set_state(const std::string& hex);

 private:
  std::array<uint64_t, 4> s_;
};

}  // namespace memscope::model
