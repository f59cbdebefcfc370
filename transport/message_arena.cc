#include "transport/message_arena.h"

namespace tierpool::transport {

namespace {
google::protobuf::ArenaOptions Options(char* initial, std::size_t size) {
  google::protobuf::ArenaOptions o;
  o.initial_block = initial;
  o.initial_block_size = size;
  // A batch of a few thousand items grows in a few steps rather than in 8 KiB ones.
  o.max_block_size = 256 * 1024;
  return o;
}
}  // namespace

MessageArena::MessageArena(std::size_t initial_block_bytes)
    : initial_(new char[initial_block_bytes]),
      arena_(Options(initial_.get(), initial_block_bytes)) {
  Reset();
}

void MessageArena::Reset() {
  arena_.Reset();
  request_ = google::protobuf::Arena::CreateMessage<wire::Request>(&arena_);
  response_ = google::protobuf::Arena::CreateMessage<wire::Response>(&arena_);
}

}  // namespace tierpool::transport
