// A namespace policy file (--namespace-policy): grants, pools and quotas, then the decisions the
// server makes from them for a few peers.
#include "store/namespace_policy.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  auto policy = NamespacePolicy::Parse(std::string(reinterpret_cast<const char*>(data), size),
                                       /*server_uid=*/1000);
  if (!policy.ok()) return 0;
  for (uid_t uid : {0u, 1000u, 1001u, 65534u}) {
    const transport::PeerCredentials peer{1, uid, 100};
    for (const char* ns : {"bob", "bob-1", "alice", "*", "x"}) {
      (void)policy->Allows(peer, ns);
      (void)policy->MapsNamespace(peer, ns);
    }
    for (std::uint32_t p = 0; p <= policy->pools().size() + 1; ++p) (void)policy->MapsPool(peer, p);
  }
  return 0;
}
