// Frames: an 8-byte header ('T' 'P', wire version, flags, little-endian u32 payload length) and a
// protobuf payload. The header lets a reader reject garbage and oversized lengths before it
// allocates anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "proto/tierpool.pb.h"

namespace tierpool::transport {

inline constexpr std::uint8_t kFrameMagic0 = 'T';
inline constexpr std::uint8_t kFrameMagic1 = 'P';
inline constexpr std::uint8_t kWireVersion = 1;       // framing version (header layout)
inline constexpr std::uint32_t kProtocolVersion = 1;  // message set version (Hello)
inline constexpr std::size_t kFrameHeaderSize = 8;
inline constexpr std::uint32_t kDefaultMaxFrameBytes = 16u << 20;

struct FrameHeader {
  std::uint8_t version = kWireVersion;
  std::uint8_t flags = 0;
  std::uint32_t length = 0;
};

void EncodeFrameHeader(std::uint32_t length, std::uint8_t out[kFrameHeaderSize]);

// INVALID_ARGUMENT for a bad magic, FAILED_PRECONDITION for another wire version,
// RESOURCE_EXHAUSTED for a length above max_frame_bytes.
Result<FrameHeader> DecodeFrameHeader(const std::uint8_t in[kFrameHeaderSize],
                                      std::uint32_t max_frame_bytes);

// Header + serialized message, ready to write.
Result<std::string> EncodeFrame(const google::protobuf::MessageLite& message,
                                std::uint32_t max_frame_bytes);
// The same into *out (its capacity reused: a connection's frames cost no allocation once its
// buffer is as large as they are). *out is left empty on an error.
Status EncodeFrameInto(const google::protobuf::MessageLite& message, std::uint32_t max_frame_bytes,
                       std::string* out);

// Sends protobuf's own log lines (a parse error per malformed message, by default straight to
// stderr) to spdlog at debug level, so that a client sending garbage cannot flood the log.
void RouteProtobufLogs();

// Conversions between the wire Status and tierpool::Status.
inline void ToWire(const Status& s, wire::Status* out) {
  out->set_code(static_cast<std::uint32_t>(s.code()));
  out->set_message(s.message());
}
inline Status FromWire(const wire::Status& s) {
  if (s.code() > static_cast<std::uint32_t>(StatusCode::kPermissionDenied)) {
    return Status::Internal("unknown status code " + std::to_string(s.code()) + ": " + s.message());
  }
  return Status(static_cast<StatusCode>(s.code()), s.message());
}

}  // namespace tierpool::transport
