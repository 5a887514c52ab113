#include "base/rpc/frame.h"

#include <algorithm>
#include <cstring>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/strings.h"

namespace megastore::rpc {

FrameReader::FrameReader(size_t max_frame_bytes)
    : max_frame_bytes_(max_frame_bytes), buf_(kReadChunk) {}

std::pair<char*, size_t> FrameReader::Prepare() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
    if (buf_.size() > kShrinkAbove) buf_.assign(kReadChunk, 0);  // after a huge frame
  }
  size_t want = kReadChunk;
  if (const size_t buffered = end_ - begin_; buffered >= kFrameHeaderBytes) {
    const size_t length = DecodeFixed32(buf_.data() + begin_);
    // Grow with the bytes that have arrived, not with what the header
    // announces. (A length over the limit never gets here: Next refuses it.)
    if (length <= max_frame_bytes_) {
      want = std::max(want, std::min(kFrameHeaderBytes + length - buffered, buffered));
    }
  }
  if (buf_.size() - end_ < want) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    if (buf_.size() - end_ < want) buf_.resize(end_ + want);
  }
  return {buf_.data() + end_, buf_.size() - end_};
}

void FrameReader::Commit(size_t n) { end_ += n; }

bool FrameReader::incomplete() const {
  size_t at = begin_;
  while (end_ - at >= kFrameHeaderBytes) {
    const size_t length = DecodeFixed32(buf_.data() + at);
    if (end_ - at < kFrameHeaderBytes + length) return true;
    at += kFrameHeaderBytes + length;
  }
  return at < end_;
}

void FrameReader::Reset() {
  begin_ = end_ = 0;
  buf_.assign(kReadChunk, 0);
}

absl::StatusOr<bool> FrameReader::Next(RpcEnvelope* envelope) {
  if (end_ - begin_ < kFrameHeaderBytes) return false;
  const char* header = buf_.data() + begin_;
  const uint32_t length = DecodeFixed32(header);
  if (length > max_frame_bytes_) {
    return absl::ResourceExhaustedError(StrCat("frame of ", length, " bytes exceeds the limit of ",
                                               max_frame_bytes_, " (max_frame_bytes)"));
  }
  if (end_ - begin_ < kFrameHeaderBytes + length) return false;
  const std::string_view payload(header + kFrameHeaderBytes, length);
  if (crc32c::Unmask(DecodeFixed32(header + 4)) != crc32c::Value(payload)) {
    return absl::DataLossError("frame checksum mismatch");
  }
  if (!envelope->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError("frame is not an RpcEnvelope");
  }
  begin_ += kFrameHeaderBytes + length;
  return true;
}

}  // namespace megastore::rpc
