// Client::PutBatch and Client::GetBatch. A large batch goes in parts whose requests are
// pipelined on the connection: every part's reserve (or get) is sent at once, and each part's
// bytes are copied (and its commit sent) as soon as its reply arrives, while the server is still
// working on the next part. The client's copies and messages then overlap the server's work
// instead of following it (docs/benchmarks.md, "Batches of small objects, pipelined").
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "common/checksum.h"
#include "tierpool/client.h"

namespace tierpool {

namespace {

// A batch goes in this many parts when each gets at least kMinPartItems items: below that the
// extra messages cost more than the overlap saves.
constexpr std::size_t kParts = 2;
constexpr std::size_t kMinPartItems = 16;
// Pipelining sends every part's request before reading a reply, so all of them must fit in the
// socket's send buffer (SO_SNDBUF, about 200 KiB by default on Linux): otherwise the client
// could block in a send while the server, which reads a connection's next request only after
// writing its reply, blocks writing a reply nobody reads. Batches whose requests take more than
// this, or more than half the buffer, go in one part.
constexpr std::size_t kMaxPipelinedBytes = 128 * 1024;

// The items [begin, end) of one part of a batch.
struct Range {
  std::size_t begin = 0, end = 0;
};

// The parts a batch of `items` goes in, in order. request_bytes: an upper bound on the encoded
// size of the batch's requests together; send_buffer: the connection's SO_SNDBUF.
std::vector<Range> Parts(std::size_t items, std::size_t request_bytes, std::size_t send_buffer) {
  const std::size_t room = std::min(kMaxPipelinedBytes, send_buffer / 2);
  const std::size_t count = items >= kParts * kMinPartItems && request_bytes <= room ? kParts : 1;
  std::vector<Range> out(count);
  for (std::size_t k = 0; k < count; ++k) out[k] = {items * k / count, items * (k + 1) / count};
  return out;
}

// Upper bounds on an item's encoded size in a reserve (a PutSpec with its field tags, lengths
// and varints) and in a get (a Key).
std::size_t RequestBytes(const std::string& ns, const PutItem& it) {
  return ns.size() + it.key.size() + it.options.dtype.size() + 10 * it.options.shape.size() + 64;
}
std::size_t RequestBytes(const std::string& ns, const GetItem& it) {
  return ns.size() + it.key.size() + 16;
}

// The parts of a batch of items on `conn`.
template <typename Item>
std::vector<Range> PartsOf(const std::vector<Item>& items, const std::string& ns,
                           const transport::BlockingConnection& conn) {
  std::size_t request_bytes = 0;
  for (const auto& it : items) request_bytes += RequestBytes(ns, it);
  return Parts(items.size(), request_bytes, conn.send_buffer_bytes());
}

Status TooSmall(std::string_view key, std::size_t capacity, std::uint64_t size) {
  return Status::InvalidArgument("buffer of " + std::to_string(capacity) +
                                 " bytes is too small for '" + std::string(key) + "' (" +
                                 std::to_string(size) + " bytes)");
}

// One part of a put batch and its messages (on the connection's arena).
struct Part : Range {
  wire::Request* reserve = nullptr;
  wire::Response* reserved = nullptr;
  Status reserve_sent;
  wire::Request* abort = nullptr;  // room it could not use (unaddressable, or no bytes)
  wire::Response* aborted = nullptr;
  Status abort_sent;
  wire::Request* commit = nullptr;  // null when no item reached the commit
  wire::Response* committed = nullptr;
  Status commit_sent;
  std::vector<std::size_t> in_commit;  // the items the commit names, in its order
};

}  // namespace

using detail::Borrowed;
using detail::FillSpec;
using transport::FromWire;

std::vector<Status> Client::PutBatch(const std::vector<PutItem>& items) {
  std::vector<Status> out(items.size());
  if (items.empty()) return out;
  if (core_->copy_only) {
    // No reservations without a mapping: each one's bytes in its own frame.
    for (std::size_t i = 0; i < items.size(); ++i) {
      out[i] = Put(items[i].key, items[i].data, items[i].size, items[i].options);
    }
    return out;
  }
  Borrowed conn(core_.get());
  if (!conn.status().ok()) return std::vector<Status>(items.size(), conn.status());
  transport::MessageArena& messages = conn->messages;
  messages.Reset();
  const std::vector<Range> ranges = PartsOf(items, core_->options.ns, *conn->conn);
  std::vector<Part> parts(ranges.size());
  detail::PipelinedExchange exchange(*conn.shared());

  // Phase one: every part's reserve, back to back.
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Part& p = parts[k];
    static_cast<Range&>(p) = ranges[k];
    p.reserve = k == 0 ? &messages.request() : messages.New<wire::Request>();
    auto* reserve = p.reserve->mutable_reserve();
    if (k == 0) conn->staged.GiveBack(reserve->mutable_unstage());
    for (std::size_t i = p.begin; i < p.end; ++i) {
      FillSpec(core_->options.ns, items[i].key, items[i].size, items[i].options,
               reserve->add_items());
    }
    p.reserved = k == 0 ? &messages.response() : messages.New<wire::Response>();
    p.reserve_sent = exchange.Send(*p.reserve);
  }

  // Phase two: as each part's room arrives, copy into it and send its commit.
  for (Part& p : parts) {
    Status s = p.reserve_sent.ok() ? exchange.Receive(*p.reserve, p.reserved) : p.reserve_sent;
    if (s.ok() && p.reserved->reserve().items_size() != static_cast<int>(p.end - p.begin)) {
      s = Status::Internal("bad reserve reply");
    }
    if (!s.ok()) {
      for (std::size_t i = p.begin; i < p.end; ++i) out[i] = s;
      continue;
    }
    p.in_commit.reserve(p.end - p.begin);
    for (std::size_t i = p.begin; i < p.end; ++i) {
      const auto& r = p.reserved->reserve().items(static_cast<int>(i - p.begin));
      out[i] = FromWire(r.status());
      if (!out[i].ok()) continue;
      std::uint64_t sum;
      if (items[i].size == 0) {
        sum = Xxh3(nullptr, 0);
      } else {
        std::byte* dst = core_->mappings->Address(r.extent());
        if (dst == nullptr || items[i].data == nullptr) {
          out[i] = dst == nullptr ? Status::Internal("unaddressable extent")
                                  : Status::InvalidArgument("null data");
          if (p.abort == nullptr) p.abort = messages.New<wire::Request>();
          p.abort->mutable_abort()->add_reservation_ids(r.reservation_id());
          continue;
        }
        sum = CopyAndChecksum(dst, items[i].data, items[i].size, CopyTarget::kFresh);
      }
      if (p.commit == nullptr) p.commit = messages.New<wire::Request>();
      auto* c = p.commit->mutable_commit()->add_items();
      c->set_reservation_id(r.reservation_id());
      c->set_checksum(sum);
      p.in_commit.push_back(i);
    }
    if (p.abort != nullptr) {
      p.aborted = messages.New<wire::Response>();
      p.abort_sent = exchange.Send(*p.abort);
    }
    if (p.commit != nullptr) {
      p.committed = messages.New<wire::Response>();
      p.commit_sent = exchange.Send(*p.commit);
    }
  }

  // Phase three: the replies to the aborts and commits, in the order they were sent.
  for (Part& p : parts) {
    if (p.abort != nullptr && p.abort_sent.ok()) (void)exchange.Receive(*p.abort, p.aborted);
    if (p.commit == nullptr) continue;
    Status s = p.commit_sent.ok() ? exchange.Receive(*p.commit, p.committed) : p.commit_sent;
    if (s.ok() && p.committed->statuses().items_size() != static_cast<int>(p.in_commit.size())) {
      s = Status::Internal("bad commit reply");
    }
    for (std::size_t j = 0; j < p.in_commit.size(); ++j) {
      out[p.in_commit[j]] =
          s.ok() ? FromWire(p.committed->statuses().items(static_cast<int>(j))) : s;
    }
  }
  return out;
}

std::vector<Result<std::size_t>> Client::GetBatch(const std::vector<GetItem>& items,
                                                  const GetOptions& options) {
  std::vector<Result<std::size_t>> out;
  out.reserve(items.size());
  Borrowed conn(core_.get());
  if (!conn.status().ok()) {
    for (std::size_t i = 0; i < items.size(); ++i) out.emplace_back(conn.status());
    return out;
  }
  transport::MessageArena& messages = conn->messages;
  messages.Reset();
  const std::vector<Range> ranges = PartsOf(items, core_->options.ns, *conn->conn);
  struct GetPart : Range {
    wire::Request* get = nullptr;
    wire::Response* got = nullptr;
    Status sent;
  };
  std::vector<GetPart> parts(ranges.size());
  detail::PipelinedExchange exchange(*conn.shared());
  // Every part's get, back to back.
  for (std::size_t k = 0; k < parts.size(); ++k) {
    GetPart& p = parts[k];
    static_cast<Range&>(p) = ranges[k];
    p.get = k == 0 ? &messages.request() : messages.New<wire::Request>();
    auto* get = p.get->mutable_get();
    for (std::size_t i = p.begin; i < p.end; ++i) {
      auto* key = get->add_keys();
      key->set_ns(core_->options.ns);
      key->set_key(items[i].key);
    }
    get->set_mode(core_->copy_only ? wire::INLINE : wire::AUTO);
    if (options.tier) get->set_want_tier(static_cast<wire::Tier>(*options.tier));
    p.got = k == 0 ? &messages.response() : messages.New<wire::Response>();
    if (parts.size() > 1) p.sent = exchange.Send(*p.get);
  }
  // Each part's bytes copied out as its reply arrives; one release for every pin at the end.
  wire::Request& release = *messages.New<wire::Request>();
  for (GetPart& p : parts) {
    // A batch in one part is one call (through the ring when the connection has one).
    Status s = parts.size() == 1 ? exchange.Call(*p.get, p.got)
               : p.sent.ok()     ? exchange.Receive(*p.get, p.got)
                                 : p.sent;
    if (s.ok() && p.got->get().items_size() != static_cast<int>(p.end - p.begin)) {
      s = Status::Internal("bad get reply");
    }
    if (!s.ok()) {
      for (std::size_t i = p.begin; i < p.end; ++i) out.emplace_back(s);
      continue;
    }
    for (std::size_t i = p.begin; i < p.end; ++i) {
      const auto& r = p.got->get().items(static_cast<int>(i - p.begin));
      const GetItem& it = items[i];
      Status st = FromWire(r.status());
      if (!st.ok()) {
        out.emplace_back(st);
        continue;
      }
      std::uint64_t size = r.meta().size();
      if (r.lease_id() != 0) release.mutable_release()->add_lease_ids(r.lease_id());
      if (size > it.capacity) {
        out.emplace_back(TooSmall(it.key, it.capacity, size));
        continue;
      }
      const void* src = nullptr;
      if (r.has_data()) {
        src = r.data().data();
      } else if (size > 0) {
        src = core_->mappings->ReadAddress(r.extent());
        if (src == nullptr) {
          out.emplace_back(
              Status::Internal("server returned an extent this client cannot address"));
          continue;
        }
      }
      if (size > 0) {
        if (core_->options.verify_checksums) {
          if (CopyAndChecksum(it.buffer, src, size) != r.meta().checksum()) {
            out.emplace_back(Status::DataLoss("checksum mismatch for '" + it.key + "'"));
            continue;
          }
        } else {
          CopyBytes(it.buffer, src, size);
        }
      }
      out.emplace_back(static_cast<std::size_t>(size));
    }
  }
  if (release.has_release()) exchange.SendOneWay(release);
  return out;
}

}  // namespace tierpool
