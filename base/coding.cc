#include "base/coding.h"

#include <bit>
#include <cstring>

namespace megastore {

void PutFixed32(std::string* dst, uint32_t v) {
  char buf[4];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  dst->append(buf, 4);
}

void PutFixed64(std::string* dst, uint64_t v) {
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  dst->append(buf, 8);
}

void PutVarint32(std::string* dst, uint32_t v) { PutVarint64(dst, v); }

void PutVarint64(std::string* dst, uint64_t v) {
  char buf[10];
  int n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  dst->append(buf, n);
}

void PutLengthPrefixed(std::string* dst, std::string_view s) {
  PutVarint32(dst, static_cast<uint32_t>(s.size()));
  dst->append(s);
}

uint32_t DecodeFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

bool ConsumeFixed32(std::string_view* in, uint32_t* v) {
  if (in->size() < 4) return false;
  *v = DecodeFixed32(in->data());
  in->remove_prefix(4);
  return true;
}

bool ConsumeFixed64(std::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  *v = DecodeFixed64(in->data());
  in->remove_prefix(8);
  return true;
}

bool ConsumeVarint64(std::string_view* in, uint64_t* v) {
  uint64_t result = 0;
  for (size_t i = 0; i < in->size() && i < 10; ++i) {
    const uint64_t byte = static_cast<uint8_t>((*in)[i]);
    if (i == 9 && byte > 1) return false;  // overflows 64 bits
    result |= (byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      *v = result;
      in->remove_prefix(i + 1);
      return true;
    }
  }
  return false;
}

bool ConsumeVarint32(std::string_view* in, uint32_t* v) {
  uint64_t v64;
  std::string_view copy = *in;
  if (!ConsumeVarint64(&copy, &v64) || v64 > UINT32_MAX) return false;
  *v = static_cast<uint32_t>(v64);
  *in = copy;
  return true;
}

bool ConsumeLengthPrefixed(std::string_view* in, std::string_view* s) {
  uint32_t len;
  if (!ConsumeVarint32(in, &len) || in->size() < len) return false;
  *s = in->substr(0, len);
  in->remove_prefix(len);
  return true;
}

int VarintLength(uint64_t v) {
  int len = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++len;
  }
  return len;
}

namespace {

void AppendBigEndian(std::string* dst, uint64_t v, SortOrder order) {
  if (order == SortOrder::kDescending) v = ~v;
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
  dst->append(buf, 8);
}

bool ConsumeBigEndian(std::string_view* in, uint64_t* v, SortOrder order) {
  if (in->size() < 8) return false;
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r = (r << 8) | static_cast<uint8_t>((*in)[i]);
  in->remove_prefix(8);
  *v = order == SortOrder::kDescending ? ~r : r;
  return true;
}

constexpr uint64_t kSignBit = uint64_t{1} << 63;
constexpr uint64_t kCanonicalNaN = 0x7ff8000000000000ULL;

}  // namespace

void AppendOrderedUint64(std::string* dst, uint64_t v, SortOrder order) {
  AppendBigEndian(dst, v, order);
}

void AppendOrderedInt64(std::string* dst, int64_t v, SortOrder order) {
  AppendBigEndian(dst, static_cast<uint64_t>(v) ^ kSignBit, order);
}

void AppendOrderedDouble(std::string* dst, double v, SortOrder order) {
  uint64_t bits;
  if (v != v) {
    bits = kCanonicalNaN;
  } else if (v == 0.0) {
    bits = 0;  // folds -0.0 into +0.0
  } else {
    bits = std::bit_cast<uint64_t>(v);
  }
  // Negative numbers: invert everything (larger magnitude sorts first);
  // positive numbers: set the sign bit so they sort after all negatives.
  bits = (bits & kSignBit) ? ~bits : (bits | kSignBit);
  AppendBigEndian(dst, bits, order);
}

void AppendOrderedBytes(std::string* dst, std::string_view v, SortOrder order) {
  const size_t start = dst->size();
  dst->reserve(start + v.size() + 2);
  size_t from = 0;
  while (true) {
    const size_t zero = v.find('\0', from);
    if (zero == std::string_view::npos) {
      dst->append(v.substr(from));
      break;
    }
    dst->append(v.substr(from, zero - from));
    dst->push_back('\x00');
    dst->push_back('\xff');
    from = zero + 1;
  }
  dst->push_back('\x00');
  dst->push_back('\x01');
  if (order == SortOrder::kDescending) {
    for (size_t i = start; i < dst->size(); ++i) (*dst)[i] = static_cast<char>(~(*dst)[i]);
  }
}

bool ConsumeOrderedUint64(std::string_view* in, uint64_t* v, SortOrder order) {
  return ConsumeBigEndian(in, v, order);
}

bool ConsumeOrderedInt64(std::string_view* in, int64_t* v, SortOrder order) {
  uint64_t u;
  if (!ConsumeBigEndian(in, &u, order)) return false;
  *v = static_cast<int64_t>(u ^ kSignBit);
  return true;
}

bool ConsumeOrderedDouble(std::string_view* in, double* v, SortOrder order) {
  uint64_t bits;
  if (!ConsumeBigEndian(in, &bits, order)) return false;
  bits = (bits & kSignBit) ? (bits & ~kSignBit) : ~bits;
  *v = std::bit_cast<double>(bits);
  return true;
}

bool ConsumeOrderedBytes(std::string_view* in, std::string* v, SortOrder order) {
  v->clear();
  if (order == SortOrder::kAscending) {
    // Fast path: copy runs between zero bytes in bulk.
    size_t pos = 0;
    while (true) {
      const size_t zero = in->find('\0', pos);
      if (zero == std::string_view::npos || zero + 1 >= in->size()) return false;
      v->append(in->data() + pos, zero - pos);
      const char next = (*in)[zero + 1];
      if (next == '\x01') {
        in->remove_prefix(zero + 2);
        return true;
      }
      if (next != '\xff') return false;
      v->push_back('\0');
      pos = zero + 2;
    }
  }
  for (size_t i = 0; i < in->size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(~static_cast<uint8_t>((*in)[i]));
    if (c != 0) {
      v->push_back(static_cast<char>(c));
      continue;
    }
    if (i + 1 >= in->size()) return false;
    const uint8_t next = static_cast<uint8_t>(~static_cast<uint8_t>((*in)[i + 1]));
    if (next == 0x01) {
      in->remove_prefix(i + 2);
      return true;
    }
    if (next != 0xff) return false;
    v->push_back('\0');
    ++i;
  }
  return false;
}

std::string PrefixSuccessor(std::string_view prefix) {
  std::string s(prefix);
  while (!s.empty()) {
    const uint8_t last = static_cast<uint8_t>(s.back());
    if (last != 0xff) {
      s.back() = static_cast<char>(last + 1);
      return s;
    }
    s.pop_back();
  }
  return s;
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    out.push_back(kDigits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 0xf]);
  }
  return out;
}

std::string EscapeBytes(std::string_view bytes, size_t max_len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < max_len; ++i) {
    const uint8_t c = static_cast<uint8_t>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    }
  }
  if (bytes.size() > max_len) out += "...";
  return out;
}

}  // namespace megastore
