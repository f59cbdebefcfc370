#include "transport/framing.h"

#include <google/protobuf/stubs/logging.h>

#include "common/logging.h"

namespace tierpool::transport {

void EncodeFrameHeader(std::uint32_t length, std::uint8_t out[kFrameHeaderSize]) {
  out[0] = kFrameMagic0;
  out[1] = kFrameMagic1;
  out[2] = kWireVersion;
  out[3] = 0;
  out[4] = static_cast<std::uint8_t>(length);
  out[5] = static_cast<std::uint8_t>(length >> 8);
  out[6] = static_cast<std::uint8_t>(length >> 16);
  out[7] = static_cast<std::uint8_t>(length >> 24);
}

Result<FrameHeader> DecodeFrameHeader(const std::uint8_t in[kFrameHeaderSize],
                                      std::uint32_t max_frame_bytes) {
  if (in[0] != kFrameMagic0 || in[1] != kFrameMagic1) {
    return Status::InvalidArgument("not a tierpool frame (bad magic)");
  }
  FrameHeader h;
  h.version = in[2];
  h.flags = in[3];
  h.length = static_cast<std::uint32_t>(in[4]) | static_cast<std::uint32_t>(in[5]) << 8 |
             static_cast<std::uint32_t>(in[6]) << 16 | static_cast<std::uint32_t>(in[7]) << 24;
  if (h.version != kWireVersion) {
    return Status::FailedPrecondition("wire version " + std::to_string(h.version) +
                                      " is not supported (this side speaks " +
                                      std::to_string(kWireVersion) + ")");
  }
  if (h.length > max_frame_bytes) {
    return Status::ResourceExhausted("frame of " + std::to_string(h.length) +
                                     " bytes exceeds the limit of " +
                                     std::to_string(max_frame_bytes));
  }
  return h;
}

Status EncodeFrameInto(const google::protobuf::MessageLite& message, std::uint32_t max_frame_bytes,
                       std::string* out) {
  out->clear();
  std::size_t size = message.ByteSizeLong();
  if (size > max_frame_bytes) {
    return Status::ResourceExhausted("message of " + std::to_string(size) +
                                     " bytes exceeds the frame limit of " +
                                     std::to_string(max_frame_bytes));
  }
  out->resize(kFrameHeaderSize + size);
  EncodeFrameHeader(static_cast<std::uint32_t>(size), reinterpret_cast<std::uint8_t*>(out->data()));
  if (!message.SerializeToArray(out->data() + kFrameHeaderSize, static_cast<int>(size))) {
    out->clear();
    return Status::Internal("could not serialize message");
  }
  return Status::Ok();
}

Result<std::string> EncodeFrame(const google::protobuf::MessageLite& message,
                                std::uint32_t max_frame_bytes) {
  std::string out;
  TIERPOOL_RETURN_IF_ERROR(EncodeFrameInto(message, max_frame_bytes, &out));
  return out;
}

void RouteProtobufLogs() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
        if (level >= google::protobuf::LOGLEVEL_FATAL) {
          spdlog::critical("protobuf {}:{}: {}", file, line, message);
        } else {
          spdlog::debug("protobuf {}:{}: {}", file, line, message);
        }
      });
}

}  // namespace tierpool::transport
