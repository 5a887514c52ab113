// libFuzzer target: any bytes as what a peer sends on an RPC connection, cut
// into reads of varying sizes. The decoder must never crash, must stop at
// the first bad frame with an error, must never hold more than a bounded
// multiple of what it was sent, and every frame it accepts must decode the
// same after re-encoding.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/rpc/frame.h"
#include "base/rpc/rpc.h"

namespace {

// Feeds `bytes` to `reader` in reads of at most `chunk` bytes.
void Feed(megastore::rpc::FrameReader& reader, std::string_view bytes, size_t chunk) {
  while (!bytes.empty()) {
    auto [buf, room] = reader.Prepare();
    if (room == 0) std::abort();
    const size_t n = std::min({room, bytes.size(), chunk});
    std::memcpy(buf, bytes.data(), n);
    reader.Commit(n);
    bytes.remove_prefix(n);
  }
}

// Rewrites the checksum of every whole frame in `bytes`, so the fuzzer gets
// past the checksum into the envelope parser.
void FixChecksums(std::string* bytes) {
  size_t at = 0;
  while (bytes->size() - at >= megastore::rpc::kFrameHeaderBytes) {
    const uint32_t length = megastore::DecodeFixed32(bytes->data() + at);
    if (bytes->size() - at - megastore::rpc::kFrameHeaderBytes < length) return;
    const std::string_view payload(bytes->data() + at + megastore::rpc::kFrameHeaderBytes, length);
    std::string crc;
    megastore::PutFixed32(&crc, megastore::crc32c::Mask(megastore::crc32c::Value(payload)));
    bytes->replace(at + 4, 4, crc);
    at += megastore::rpc::kFrameHeaderBytes + length;
  }
}

}  // namespace

// With MS_FUZZ_SEEDS set, writes a few well-formed request streams there
// (./ms fuzz seeds the corpus with them).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = std::getenv("MS_FUZZ_SEEDS");
  if (dir == nullptr) return 0;
  using megastore::rpc::RpcEnvelope;
  for (int i = 0; i < 4; ++i) {
    std::string stream = {static_cast<char>(20), static_cast<char>(i * 37)};
    for (int k = 0; k <= i; ++k) {
      RpcEnvelope e;
      e.set_call_id(static_cast<uint64_t>(k + 1));
      e.set_method(k % 2 ? "repl.Paxos" : "bt.ReadRow");
      e.set_body(std::string(static_cast<size_t>(10 * k), 'x'));
      e.set_timeout_micros(1000000);
      e.set_more(k == 2);
      stream += megastore::rpc::EncodeFrame(e.SerializeAsString());
    }
    if (FILE* f = std::fopen((std::string(dir) + "/frames" + std::to_string(i)).c_str(), "wb")) {
      std::fwrite(stream.data(), 1, stream.size(), f);
      std::fclose(f);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megastore::rpc;
  if (size < 2) return 0;
  // The first byte picks the frame limit, the second the read sizes and
  // (its top bit) whether checksums are made right first.
  const size_t max_frame = size_t{1} << (data[0] % 24);
  uint32_t rng = (data[1] & 0x7f) | 1u;
  std::string bytes(reinterpret_cast<const char*>(data + 2), size - 2);
  if (data[1] & 0x80) FixChecksums(&bytes);
  const std::string_view input(bytes);
  FrameReader reader(max_frame);
  size_t fed = 0;
  while (fed < input.size()) {
    rng = rng * 1103515245u + 12345u;
    const size_t n = std::min(input.size() - fed, size_t{1} + (rng >> 16) % 4096);
    Feed(reader, input.substr(fed, n), n);
    fed += n;
    // Growth follows the bytes sent: 64 KiB to start, at most doubling.
    if (reader.capacity() > (size_t{64} << 10) + 2 * fed) std::abort();
    for (;;) {
      RpcEnvelope e;
      absl::StatusOr<bool> got = reader.Next(&e);
      if (!got.ok()) return 0;  // the connection would close here
      if (!*got) break;
      const std::string frame = EncodeFrame(e.SerializeAsString());
      FrameReader check(frame.size());
      Feed(check, frame, 1000);
      RpcEnvelope again;
      absl::StatusOr<bool> back = check.Next(&again);
      if (!back.ok() || !*back || again.SerializeAsString() != e.SerializeAsString()) std::abort();
    }
  }
  return 0;
}
