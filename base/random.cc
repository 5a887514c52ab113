#include "base/random.h"

namespace megastore {
namespace {

uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Random::Random(uint64_t seed) {
  for (uint64_t& s : s_) s = SplitMix64(seed);
}

uint64_t Random::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Random::Uniform(uint64_t n) {
  // Lemire's multiply-shift; the tiny bias is irrelevant for our uses.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
}

double Random::NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

std::string Random::Bytes(size_t len) {
  std::string out(len, '\0');
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = Next();
    for (size_t j = i; j < len && j < i + 8; ++j) {
      out[j] = static_cast<char>(v & 0xff);
      v >>= 8;
    }
  }
  return out;
}

}  // namespace megastore
