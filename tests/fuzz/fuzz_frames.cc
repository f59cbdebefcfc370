// Bytes from a client's socket: a stream of frames, each decoded, parsed and handled by the real
// service over a real (small) store, as one connection would be.
#include <string>
#include <vector>

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
    (void)h.service->MayBlock(1, request);
    wire::Response response;
    std::vector<int> fds;  // the arenas' own descriptors: not ours to close
    if (h.service->Handle(1, transport::PeerCredentials{}, request, &response, &fds)) {
      std::string out;
      (void)response.SerializeToString(&out);
    }
  }
  h.Reset();
  return 0;
}
