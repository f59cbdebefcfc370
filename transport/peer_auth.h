// Authentication between sidecars: a shared secret, read from a file (--peer-auth), proves each
// side to the other with a challenge (HMAC-SHA256 over both sides' fresh nonces and both sides'
// identities), so a connection without the secret gets nothing, a recorded handshake cannot be
// replayed, and a proof meant for one node is worth nothing to another (a relay).
// It authenticates; it does not encrypt (the payload's integrity is checked end to end by the
// objects' XXH3 checksums). See docs/protocol.md "Peer protocol".
//
// Thread safety: immutable after Load; any thread may use it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tierpool::transport {

inline constexpr std::size_t kPeerNonceBytes = 32;
inline constexpr std::size_t kPeerMacBytes = 32;
inline constexpr std::size_t kMinPeerSecretBytes = 16;

// Who is at the other end of an authenticated connection.
struct PeerIdentity {
  std::string node_id;
  std::uint64_t incarnation = 0;
};

class PeerAuth {
 public:
  // Reads the secret: the file's bytes less trailing white space, at least kMinPeerSecretBytes.
  // A file that others than its owner may read or write is refused (it holds a credential).
  static Result<PeerAuth> Load(const std::string& path);
  // For tests.
  static Result<PeerAuth> FromSecret(std::string secret);

  // HMAC-SHA256 of role | a | b | prover's node_id, incarnation | verifier's under the secret:
  // `prover` proves itself to `verifier` and nobody else.
  std::string Mac(std::string_view role, std::string_view nonce_a, std::string_view nonce_b,
                  const PeerIdentity& prover, const PeerIdentity& verifier) const;
  // Constant-time comparison of mac with the expected one.
  bool Verify(std::string_view mac, std::string_view role, std::string_view nonce_a,
              std::string_view nonce_b, const PeerIdentity& prover,
              const PeerIdentity& verifier) const;

 private:
  explicit PeerAuth(std::string secret) : secret_(std::move(secret)) {}
  std::string secret_;
};

// kPeerNonceBytes from the system's CSPRNG.
std::string PeerNonce();
// A random 64-bit id (never 0) for a sidecar's incarnation.
std::uint64_t RandomIncarnation();

}  // namespace tierpool::transport
