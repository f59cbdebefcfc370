// Bytes from a client's socket: a stream of frames, each decoded, parsed and handled by the real
// service over a real (small) store, as one connection would be.
#include <cstdlib>
#include <string>
#include <vector>

#include "common/no_wait_scope.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/store_harness.h"
#include "transport/framing.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tierpool;
  auto& h = fuzz::StoreHarness::Get();
  std::size_t at = 0;
  for (int frames = 0; frames < 64 && size - at >= transport::kFrameHeaderSize; ++frames) {
    auto header = transport::DecodeFrameHeader(data + at, 1 << 20);
    if (!header.ok()) break;  // the server answers and closes
    at += transport::kFrameHeaderSize;
    if (header->length > size - at) break;  // the rest never arrives
    wire::Request request;
    const bool parsed = request.ParseFromArray(data + at, static_cast<int>(header->length));
    at += header->length;
    if (!parsed || request.body_case() == wire::Request::BODY_NOT_SET) continue;
    wire::Response response;
    std::vector<int> fds;  // the arenas' own descriptors: not ours to close
    bool reply = false;
    bool refused = false;
    const bool may_block = h.service->MayBlock(1, request);
    if (!may_block) {
      // As the transport does (transport/unix_session.cc): on the I/O thread no wait, and a
      // request that refused one carried on from where it stopped, as on a worker.
      NoWaitScope no_wait;
      reply = h.service->Handle(1, transport::PeerCredentials{}, request, &response, &fds);
      refused = no_wait.refused();
    }
    if (may_block || refused) {
      reply = h.service->Handle(1, transport::PeerCredentials{}, request, &response, &fds);
    }
    // A batch carried on from where it stopped answers each item once: as many as it asked.
    if (refused && response.status().code() == 0) {
      int asked = -1, answered = -1;
      if (request.has_reserve()) {
        // (Packed items count too: with an OK status, their lists agreed.)
        asked = request.reserve().items_size() + request.reserve().packed().sizes_size();
        answered =
            response.reserve().items_size() + response.reserve().packed().reservation_ids_size();
      } else if (request.has_put_inline()) {
        asked = request.put_inline().items_size();
        answered = response.statuses().items_size();
      } else if (request.has_get()) {
        asked = request.get().keys_size() + request.get().packed_keys().key_bytes_size();
        // (Pinned results may come packed: GetRequest.packed_results.)
        answered = response.get().items_size() + response.get().packed().sizes_size();
      }
      if (asked != answered) std::abort();
    }
    if (reply) {
      std::string out;
      (void)response.SerializeToString(&out);
    }
  }
  h.Reset();
  return 0;
}
