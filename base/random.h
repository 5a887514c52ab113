// A small, fast, seedable pseudo-random generator (xoshiro256**).
//
// Everything that draws random numbers takes a Random (usually from Env), so
// a simulation run replays exactly from its seed. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace megastore {

class Random {
 public:
  explicit Random(uint64_t seed);

  uint64_t Next();
  // Uniform in [0, n); n must be > 0.
  uint64_t Uniform(uint64_t n);
  // True with probability 1/n.
  bool OneIn(uint64_t n) { return Uniform(n) == 0; }
  // Uniform in [0, 1).
  double NextDouble();
  // `len` random bytes (any byte value).
  std::string Bytes(size_t len);

  // std::uniform_random_bit_generator, for <random> distributions.
  using result_type = uint64_t;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() { return Next(); }

 private:
  uint64_t s_[4];
};

}  // namespace megastore
