// CRC-32C (Castagnoli), the checksum of every record we write to disk or to
// the network. Uses the SSE4.2 instruction when the CPU has it.
#pragma once

#include <cstdint>
#include <string_view>

namespace megastore::crc32c {

// The CRC-32C of concat(A, data) where init_crc is the CRC-32C of A.
uint32_t Extend(uint32_t init_crc, const char* data, size_t n);

inline uint32_t Value(std::string_view data) { return Extend(0, data.data(), data.size()); }

// A CRC stored next to the data it covers is masked (as in LevelDB), so that
// computing the CRC of a string that contains embedded CRCs stays robust.
inline uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t Unmask(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace megastore::crc32c
