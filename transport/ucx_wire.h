// The active messages of the peer data path over UCX (docs/protocol.md, "Peer data over UCX").
// Headers are fixed-size and little-endian as laid out here (x86-64 and aarch64 both are); every
// one is checked for its size and magic before a field is read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace tierpool::transport {

inline constexpr unsigned kUcxAmWrite = 1;  // borrower -> lender: header, then the payload
inline constexpr unsigned kUcxAmRead = 2;   // borrower -> lender: header alone
inline constexpr unsigned kUcxAmReply = 3;  // lender -> borrower: header, then a read's bytes
// lender -> borrower, a reply header alone: a write's bytes are being fetched (its answer
// follows once they are in), so the borrower knows the lender lives while they move.
inline constexpr unsigned kUcxAmStarted = 4;

inline constexpr std::uint32_t kUcxRequestMagic = 0x31525054;  // "TPR1"
inline constexpr std::uint32_t kUcxReplyMagic = 0x31415054;    // "TPA1"
inline constexpr std::size_t kUcxTokenBytes = 16;
inline constexpr std::size_t kUcxMaxMessage = 200;  // a refusal's words, cut to this

// A write or a read of a region's range, as RegionRange on TCP, naming the session by the token
// the authenticated TCP link handed out (PeerServer: Info.ucx_open).
struct UcxRequestHeader {
  std::uint32_t magic = kUcxRequestMagic;
  std::uint32_t reserved = 0;
  std::uint64_t id = 0;
  std::uint64_t lender_incarnation = 0;
  std::uint8_t token[kUcxTokenBytes] = {};
  std::uint64_t region = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t sequence = 0;  // writes: RegionRange.sequence (fences)
};
static_assert(sizeof(UcxRequestHeader) == 72);

struct UcxReplyHeader {
  std::uint32_t magic = kUcxReplyMagic;
  std::uint32_t code = 0;  // tierpool::StatusCode
  std::uint64_t id = 0;
  std::uint64_t lend_capacity = 0;
  std::uint64_t lend_free = 0;
  std::uint32_t message_length = 0;
  char message[kUcxMaxMessage] = {};

  void SetMessage(const std::string& m) {
    message_length = static_cast<std::uint32_t>(std::min(m.size(), kUcxMaxMessage));
    std::memcpy(message, m.data(), message_length);
  }
};

}  // namespace tierpool::transport
