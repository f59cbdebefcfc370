// A request and its reply on one protobuf arena, reset after each reply. Parsing and building a
// message of many items then costs a few block allocations instead of several per item: without
// it, a request of another kind than the connection's last one frees and rebuilds every
// sub-message (a oneof keeps only the member in use). The server's own time for a batch of 64
// small gets fell from 61 to 44 us with this alone (docs/benchmarks/redis.md, "Batches of small
// objects, pipelined").
//
// Locking: none. Whoever owns one (a session, a client connection) uses it for one request at a
// time; the messages it hands out live until the next Reset.
#pragma once

#include <google/protobuf/arena.h>

#include <cstddef>
#include <memory>

#include "proto/tierpool.pb.h"

namespace tierpool::transport {

class MessageArena {
 public:
  // The first `initial_block_bytes` are allocated once and kept across resets; what a larger
  // message needs beyond them is given back at the next Reset.
  explicit MessageArena(std::size_t initial_block_bytes = kDefaultInitialBlock);
  MessageArena(const MessageArena&) = delete;
  MessageArena& operator=(const MessageArena&) = delete;

  wire::Request& request() { return *request_; }
  wire::Response& response() { return *response_; }
  // Another message on the arena (a second round trip's), gone at the next Reset.
  template <typename Message>
  Message* New() {
    return google::protobuf::Arena::CreateMessage<Message>(&arena_);
  }
  // Both messages empty again, on the initial block only.
  void Reset();

  static constexpr std::size_t kDefaultInitialBlock = 16 * 1024;

 private:
  std::unique_ptr<char[]> initial_;
  google::protobuf::Arena arena_;
  wire::Request* request_ = nullptr;
  wire::Response* response_ = nullptr;
};

}  // namespace tierpool::transport
