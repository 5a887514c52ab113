// The RPC wire frame: an 8-byte header (payload length, masked CRC-32C of
// the payload; both little-endian fixed32) and a serialized RpcEnvelope.
//
// FrameReader cuts a byte stream into envelopes, so that one read can
// deliver many frames and one frame may take many reads. It trusts nothing
// it reads: a length over the limit is refused before anything is
// allocated for it, and the buffer grows only as bytes arrive (a peer that
// announces 60 MiB and sends 8 bytes costs 64 KiB). Includes the generated
// rpc.pb.h: only for rpc.cc, its tests and its fuzzer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/rpc/rpc.pb.h"

namespace megastore::rpc {

inline constexpr size_t kFrameHeaderBytes = 8;

class FrameReader {
 public:
  explicit FrameReader(size_t max_frame_bytes);

  // Where the next read should put bytes: room for at least 64 KiB, or for
  // more of the frame being received, never more than twice what is
  // already buffered of it.
  std::pair<char*, size_t> Prepare();
  // `n` bytes were read into what Prepare returned.
  void Commit(size_t n);
  // Forgets everything buffered (a new connection).
  void Reset();
  // Bytes are buffered (complete frames not yet taken, or part of one).
  bool partial() const { return end_ > begin_; }
  // The bytes buffered end inside a frame (its sender has more to send).
  bool incomplete() const;
  // The bytes buffered and not yet taken as frames.
  std::string_view buffered() const { return {buf_.data() + begin_, end_ - begin_}; }
  // Bytes the buffer holds (for tests of the growth bound).
  size_t capacity() const { return buf_.size(); }

  // The next complete frame: true and `envelope` filled; false if more bytes
  // are needed; an error (the connection must close) for a frame over the
  // limit (ResourceExhausted), a checksum mismatch or a payload that is not
  // an RpcEnvelope (DataLoss).
  absl::StatusOr<bool> Next(RpcEnvelope* envelope);

 private:
  static constexpr size_t kReadChunk = 64 << 10;
  static constexpr size_t kShrinkAbove = 4 << 20;
  const size_t max_frame_bytes_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // buffered bytes: [begin_, end_)
};

}  // namespace megastore::rpc
