// Which data path the cluster tests run over: TIERPOOL_TEST_PEER_TRANSPORT=ucx runs them with
// replicas' bytes over UCX (lenders offer it, borrowers and daemons use it); otherwise over TCP
// frames. ctest runs the cluster tests both ways (tests/CMakeLists.txt).
#pragma once

#include <cstdlib>
#include <string>

namespace tierpool::testing {

inline bool TestsOverUcx() {
  const char* v = std::getenv("TIERPOOL_TEST_PEER_TRANSPORT");
  return v != nullptr && std::string(v) == "ucx";
}

}  // namespace tierpool::testing
