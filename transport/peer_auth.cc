#include "transport/peer_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace tierpool::transport {

Result<PeerAuth> PeerAuth::FromSecret(std::string secret) {
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) {
    secret.pop_back();
  }
  if (secret.size() < kMinPeerSecretBytes) {
    return Status::InvalidArgument("the peer secret must have at least " +
                                   std::to_string(kMinPeerSecretBytes) + " bytes");
  }
  return PeerAuth(std::move(secret));
}

Result<PeerAuth> PeerAuth::Load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("--peer-auth " + path, errno);
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return Status::PermissionDenied("--peer-auth " + path +
                                    ": others than its owner may read or write it (chmod 600)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("--peer-auth " + path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  auto auth = FromSecret(text.str());
  if (!auth.ok())
    return Status::InvalidArgument("--peer-auth " + path + ": " + auth.status().message());
  return auth;
}

std::string PeerAuth::Mac(std::string_view role, std::string_view nonce_a, std::string_view nonce_b,
                          const PeerIdentity& prover, const PeerIdentity& verifier) const {
  // Each field is length-prefixed so no two different inputs hash the same.
  std::string msg;
  auto add = [&msg](std::string_view s) {
    const auto n = static_cast<std::uint32_t>(s.size());
    msg.append(reinterpret_cast<const char*>(&n), sizeof n);
    msg.append(s);
  };
  add("tierpool-peer-v2");
  add(role);
  add(nonce_a);
  add(nonce_b);
  for (const PeerIdentity* who : {&prover, &verifier}) {
    add(who->node_id);
    msg.append(reinterpret_cast<const char*>(&who->incarnation), sizeof who->incarnation);
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool PeerAuth::Verify(std::string_view mac, std::string_view role, std::string_view nonce_a,
                      std::string_view nonce_b, const PeerIdentity& prover,
                      const PeerIdentity& verifier) const {
  const std::string want = Mac(role, nonce_a, nonce_b, prover, verifier);
  return mac.size() == want.size() && CRYPTO_memcmp(mac.data(), want.data(), want.size()) == 0;
}

std::string PeerNonce() {
  std::string n(kPeerNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    // The CSPRNG failing is not something to carry on from: a predictable nonce breaks the proof.
    std::abort();
  }
  return n;
}

std::uint64_t RandomIncarnation() {
  std::uint64_t v = 0;
  while (v == 0) {
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1) std::abort();
  }
  return v;
}

}  // namespace tierpool::transport
