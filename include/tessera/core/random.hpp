// tessera/core/random.hpp - a seeded, portable random generator (same stream on every platform).
#pragma once

#include <cmath>
#include <cstdint>

#include "../config.hpp"

TESSERA_BEGIN_NAMESPACE

/// splitmix64: the state advanced by the golden ratio, then mixed. Seeds Generator, and makes
/// the counter-based draws of the dropout mask (state = key + i * step for element i).
inline constexpr uint64_t splitmix64_step = 0x9e3779b97f4a7c15ull;
TESSERA_HOST_DEVICE inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// xoshiro256** seeded through splitmix64. Unlike std::normal_distribution, every draw is
/// specified here, so a seed gives the same tensors on every compiler and platform.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) { this->seed(seed); }
  void seed(uint64_t s) {
    for (auto& w : s_) {
      s += splitmix64_step;
      w = splitmix64_mix(s);
    }
    has_spare_ = false;
  }
  /// 64 uniformly random bits.
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n) (n > 0), without modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }
  /// Standard normal (Box-Muller; the second value of each pair is kept for the next call).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1;
    do u1 = uniform();
    while (u1 <= 0.0);
    const double u2 = uniform(), r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(6.283185307179586 * u2);
    has_spare_ = true;
    return r * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  double spare_ = 0;
  bool has_spare_ = false;
};

TESSERA_END_NAMESPACE
