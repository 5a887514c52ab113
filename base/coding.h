// Byte encodings: little-endian varints and fixed-width integers for record
// formats, and order-preserving ("memcomparable") encodings for keys.
//
// Order-preserving encodings guarantee: for values a and b of one type,
// a < b  <=>  Encode(a) < Encode(b) under bytewise comparison, and the
// encodings are prefix-free, so they can be concatenated into composite keys
// whose bytewise order is the lexicographic order of the components.
// Descending variants invert every byte of the ascending encoding.
//
// Consume* functions read from the front of `in` and advance it; they return
// false (leaving `in` unspecified) on malformed or truncated input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace megastore {

// ---- record formats --------------------------------------------------------

void PutFixed32(std::string* dst, uint32_t v);
void PutFixed64(std::string* dst, uint64_t v);
void PutVarint32(std::string* dst, uint32_t v);
void PutVarint64(std::string* dst, uint64_t v);
// A varint32 length followed by the bytes.
void PutLengthPrefixed(std::string* dst, std::string_view s);

uint32_t DecodeFixed32(const char* p);
uint64_t DecodeFixed64(const char* p);

bool ConsumeFixed32(std::string_view* in, uint32_t* v);
bool ConsumeFixed64(std::string_view* in, uint64_t* v);
bool ConsumeVarint32(std::string_view* in, uint32_t* v);
bool ConsumeVarint64(std::string_view* in, uint64_t* v);
bool ConsumeLengthPrefixed(std::string_view* in, std::string_view* s);

int VarintLength(uint64_t v);

// ---- order-preserving key encodings -----------------------------------------

enum class SortOrder { kAscending, kDescending };

// Big-endian fixed 8 bytes.
void AppendOrderedUint64(std::string* dst, uint64_t v, SortOrder order = SortOrder::kAscending);
// Sign bit flipped, then big-endian: negative numbers sort first.
void AppendOrderedInt64(std::string* dst, int64_t v, SortOrder order = SortOrder::kAscending);
// IEEE-754 total order with two rules: -0.0 is encoded as +0.0 (they compare
// equal), and every NaN is encoded as one canonical NaN that sorts after +inf.
void AppendOrderedDouble(std::string* dst, double v, SortOrder order = SortOrder::kAscending);
// Any bytes: 0x00 is escaped as 0x00 0xFF and the string ends with 0x00 0x01,
// so embedded zero bytes and prefixes order correctly.
void AppendOrderedBytes(std::string* dst, std::string_view v,
                        SortOrder order = SortOrder::kAscending);

bool ConsumeOrderedUint64(std::string_view* in, uint64_t* v,
                          SortOrder order = SortOrder::kAscending);
bool ConsumeOrderedInt64(std::string_view* in, int64_t* v, SortOrder order = SortOrder::kAscending);
bool ConsumeOrderedDouble(std::string_view* in, double* v, SortOrder order = SortOrder::kAscending);
bool ConsumeOrderedBytes(std::string_view* in, std::string* v,
                         SortOrder order = SortOrder::kAscending);

// The smallest string greater than every string that starts with `prefix`,
// or "" when there is none (prefix empty or all 0xFF): "" then means
// "unbounded".
std::string PrefixSuccessor(std::string_view prefix);

// Lower-case hex of `bytes`, for error messages and debugging output.
std::string HexEncode(std::string_view bytes);
// `bytes` printed readably: printable ASCII as is, the rest as \xNN.
std::string EscapeBytes(std::string_view bytes, size_t max_len = 64);

}  // namespace megastore
