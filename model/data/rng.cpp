#include "model/data/rng.h"

#include <cstdio>
#include <stdexcept>
#include <utility>

#include "model/util/errors.h"

namespace memscope::model {

namespace {

// splitmix64: advances x by the golden-ratio increment and returns a well-mixed function of it.
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

// Four consecutive splitmix64 outputs are distinct, so the state is never all zero.
Rng::Rng(uint64_t seed) {
  for (auto& word : s_) word = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

int64_t Rng::uniform(int64_t n) {
  if (n < 1) throw std::invalid_argument("Rng::uniform: n must be >= 1, got " + std::to_string(n));
  const uint64_t range = static_cast<uint64_t>(n);
  // 2^64 mod n draws at the bottom would make the low residues likelier; reject them.
  const uint64_t reject_below = (0 - range) % range;
  uint64_t r;
  do r = next();
  while (r < reject_below);
  return static_cast<int64_t>(r % range);
}

double Rng::uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::vector<int64_t> Rng::choose(int64_t n, int64_t k) {
  if (k < 0 || k > n) throw std::invalid_argument("Rng::choose: need 0 <= k <= n");
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[i] = i;
  for (int64_t i = 0; i < k; ++i) std::swap(all[i], all[i + uniform(n - i)]);
  all.resize(static_cast<size_t>(k));
  return all;
}

uint64_t Rng::mix(uint64_t seed, uint64_t stream) {
  uint64_t x = splitmix64(seed) ^ stream;
  return splitmix64(x);
}

std::string Rng::state() const {
  std::string out;
  char word[17];
  for (uint64_t w : s_) {
    std::snprintf(word, sizeof word, "%016llx", static_cast<unsigned long long>(w));
    out += word;
  }
  return out;
}

void Rng::set_state(const std::string& hex) {
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw UserError("rng state: expected 64 hex digits, got '" + hex + "'");
  std::array<uint64_t, 4> s{};
  for (size_t i = 0; i < 4; ++i) s[i] = std::stoull(hex.substr(16 * i, 16), nullptr, 16);
  if (s == std::array<uint64_t, 4>{}) throw UserError("rng state: all zero, which xoshiro256** never leaves");
  s_ = s;
}

}  // namespace memscope::model
