// Client::PutBatch and Client::GetBatch. A large batch goes in parts whose requests are
// pipelined on the connection: every part's reserve (or get) is sent at once, and each part's
// bytes are copied (and its commit sent) as soon as its reply arrives, while the server is still
// working on the next part. The client's copies and messages then overlap the server's work
// instead of following it (docs/benchmarks/redis.md, "Batches of small objects, pipelined"). A get
// batch of few bytes on a connection with a request ring goes whole through the ring instead:
// there the socket's round trips cost more than the overlap saves.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "client/reply_shape.h"
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
// On a connection with a request ring, a get batch whose buffers come to at most this many
// bytes goes in one part, as one call through the ring: its copies are too short for the overlap
// of pipelining to pay for the socket's round trips. Measured on the development VM in turns
// (docs/benchmarks/redis.md, "Small batches through the ring"): 64 x 4 KiB gets 17% faster in one
// part, 64 x 8 KiB 13%, 64 x 16 KiB the same. Put batches keep their two parts: alone they ran
// as fast in one (64 x 4 KiB) or 7-12% slower (from 8 KiB), and with two client threads on two
// vCPUs, waiting on their rings, at a third of the rate.
constexpr std::uint64_t kOneCallGetBytes = 512 * 1024;
constexpr std::uint64_t kOneCallPutBytes = 0;  // only a batch of empty objects

// The items [begin, end) of one part of a batch.
struct Range {
  std::size_t begin = 0, end = 0;
};

// What decides how a batch is split.
struct BatchShape {
  std::size_t items = 0;
  std::size_t request_bytes = 0;   // an upper bound on the encoded size of all its requests
  std::uint64_t object_bytes = 0;  // the objects' bytes (a get's: its buffers' capacity)
};

// The parts a batch goes in, in order: one where the connection's ring carries it whole and
// its objects are at most one_call_bytes, else kParts pipelined on the socket where they fit
// its send buffer and each part is large enough, else one.
std::vector<Range> Parts(const BatchShape& b, const transport::BlockingConnection& conn,
                         std::uint64_t one_call_bytes) {
  const bool ring_call = conn.has_ring() && b.request_bytes <= transport::kRingAreaBytes &&
                         b.object_bytes <= one_call_bytes;
  const std::size_t room = std::min(kMaxPipelinedBytes, conn.send_buffer_bytes() / 2);
  const std::size_t count =
      !ring_call && b.items >= kParts * kMinPartItems && b.request_bytes <= room ? kParts : 1;
  std::vector<Range> out(count);
  for (std::size_t k = 0; k < count; ++k) {
    out[k] = {b.items * k / count, b.items * (k + 1) / count};
  }
  return out;
}

// Upper bounds on an item's encoded size in a reserve (a PutSpec with its field tags, lengths
// and varints) and in a get (a Key); the bytes it moves.
std::size_t RequestBytes(const std::string& ns, const PutItem& it) {
  return ns.size() + it.key.size() + it.options.dtype.size() + 10 * it.options.shape.size() + 64;
}
std::size_t RequestBytes(const std::string& ns, const GetItem& it) {
  return ns.size() + it.key.size() + 16;
}
std::uint64_t ObjectBytes(const PutItem& it) { return it.size; }
std::uint64_t ObjectBytes(const GetItem& it) { return it.capacity; }

// The parts of a batch of items on `conn`.
template <typename Item>
std::vector<Range> PartsOf(const std::vector<Item>& items, const std::string& ns,
                           const transport::BlockingConnection& conn,
                           std::uint64_t one_call_bytes) {
  BatchShape b{items.size(), 0, 0};
  for (const auto& it : items) {
    b.request_bytes += RequestBytes(ns, it);
    b.object_bytes += ObjectBytes(it);
  }
  return Parts(b, conn, one_call_bytes);
}

Status TooSmall(std::string_view key, std::size_t capacity, std::uint64_t size) {
  return Status::InvalidArgument("buffer of " + std::to_string(capacity) +
                                 " bytes is too small for '" + std::string(key) + "' (" +
                                 std::to_string(size) + " bytes)");
}

// Whether items [begin, end) differ only in key and size: then they go packed, as one message
// (wire::PackedPutSpecs) instead of one per item.
bool Alike(const std::vector<PutItem>& items, std::size_t begin, std::size_t end) {
  const PutOptions& a = items[begin].options;
  for (std::size_t i = begin + 1; i < end; ++i) {
    const PutOptions& b = items[i].options;
    if (b.dtype != a.dtype || b.shape != a.shape || b.kind != a.kind ||
        b.durability != a.durability || b.tier != a.tier || b.numa_node != a.numa_node ||
        b.device != a.device) {
      return false;
    }
  }
  return true;
}

// The keys of items [begin, end) back to back in *keys, each one's length in *lengths: the
// packed form of a reserve's and a get's keys.
template <typename Item>
void AppendKeys(const std::vector<Item>& items, std::size_t begin, std::size_t end,
                std::string* keys, google::protobuf::RepeatedField<std::uint32_t>* lengths) {
  std::size_t key_bytes = 0;
  for (std::size_t i = begin; i < end; ++i) key_bytes += items[i].key.size();
  keys->reserve(key_bytes);
  lengths->Reserve(static_cast<int>(end - begin));
  for (std::size_t i = begin; i < end; ++i) {
    keys->append(items[i].key);
    lengths->Add(static_cast<std::uint32_t>(items[i].key.size()));
  }
}

// The reserve of items [begin, end): packed when the server takes that and they are alike.
void FillReserve(const std::string& ns, const std::vector<PutItem>& items, std::size_t begin,
                 std::size_t end, bool packed_puts, wire::ReserveRequest* reserve) {
  if (!packed_puts || end - begin < 2 || !Alike(items, begin, end)) {
    for (std::size_t i = begin; i < end; ++i) {
      detail::FillSpec(ns, items[i].key, items[i].size, items[i].options, reserve->add_items());
    }
    return;
  }
  wire::PackedPutSpecs* packed = reserve->mutable_packed();
  detail::FillSpec(ns, {}, 0, items[begin].options, packed->mutable_spec());
  AppendKeys(items, begin, end, packed->mutable_keys(), packed->mutable_key_bytes());
  packed->mutable_sizes()->Reserve(static_cast<int>(end - begin));
  for (std::size_t i = begin; i < end; ++i) packed->add_sizes(items[i].size);
}

// The keys of items [begin, end): packed in one message when the server takes that.
void FillGetKeys(const std::string& ns, const std::vector<GetItem>& items, std::size_t begin,
                 std::size_t end, bool packed_gets, wire::GetRequest* get) {
  if (!packed_gets || end - begin < 2) {
    for (std::size_t i = begin; i < end; ++i) {
      auto* key = get->add_keys();
      key->set_ns(ns);
      key->set_key(items[i].key);
    }
    return;
  }
  wire::PackedKeys* packed = get->mutable_packed_keys();
  packed->set_ns(ns);
  AppendKeys(items, begin, end, packed->mutable_keys(), packed->mutable_key_bytes());
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

// An item whose extent lies outside every mapping (in place of its size).
constexpr std::uint64_t kUnaddressable = ~std::uint64_t{0};

}  // namespace

using detail::Borrowed;
using transport::FromWire;

std::vector<Status> Client::PutBatch(const std::vector<PutItem>& items) {
  std::vector<Status> out(items.size());
  if (items.empty()) return out;
  if (core_->copy_only()) {
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
  const std::vector<Range> ranges =
      PartsOf(items, core_->options.ns, *conn->conn, kOneCallPutBytes);
  std::vector<Part> parts(ranges.size());
  detail::PipelinedExchange exchange(*conn.shared());
  // A batch in one part (a small one, or one too large to pipeline) is a call for its room and
  // one for its commit, through the ring when the connection has one and they fit it.
  const bool one_call = parts.size() == 1;

  // Phase one: every part's reserve, back to back.
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Part& p = parts[k];
    static_cast<Range&>(p) = ranges[k];
    p.reserve = k == 0 ? &messages.request() : messages.New<wire::Request>();
    auto* reserve = p.reserve->mutable_reserve();
    if (k == 0) conn->staged.GiveBack(reserve->mutable_unstage());
    FillReserve(core_->options.ns, items, p.begin, p.end, conn->packed_puts, reserve);
    reserve->set_packed_results(conn->packed_reserve_results);
    p.reserved = k == 0 ? &messages.response() : messages.New<wire::Response>();
    if (!one_call) p.reserve_sent = exchange.Send(*p.reserve);
  }

  // Phase two: as each part's room arrives, copy into it and send its commit.
  for (Part& p : parts) {
    Status s = one_call              ? exchange.Call(*p.reserve, p.reserved)
               : p.reserve_sent.ok() ? exchange.Receive(*p.reserve, p.reserved)
                                     : p.reserve_sent;
    const wire::ReserveReply& reply = p.reserved->reserve();
    if (s.ok() && !detail::ReserveReplyAnswers(reply, p.end - p.begin)) {
      s = Status::Internal("bad reserve reply");
    }
    if (!s.ok()) {
      for (std::size_t i = p.begin; i < p.end; ++i) out[i] = s;
      continue;
    }
    p.in_commit.reserve(p.end - p.begin);
    const wire::PackedReserveResults& rooms = reply.packed();
    detail::ReplyOrder order(rooms.positions(), rooms.reservation_ids_size() > 0);
    for (std::size_t i = p.begin; i < p.end; ++i) {
      int at;
      std::uint64_t reservation;
      std::byte* dst = nullptr;
      if (order.Plain(i - p.begin, &at)) {
        const auto& r = reply.items(at);
        out[i] = FromWire(r.status());
        if (!out[i].ok()) continue;
        reservation = r.reservation_id();
        if (items[i].size > 0) dst = conn->mappings->Address(r.extent());
      } else {
        out[i] = Status::Ok();
        reservation = rooms.reservation_ids(at);
        if (items[i].size > 0) {
          dst = conn->mappings->Address(rooms.arena_ids(at), rooms.offsets(at), rooms.lengths(at));
        }
      }
      std::uint64_t sum;
      if (items[i].size == 0) {
        sum = Xxh3(nullptr, 0);
      } else {
        if (dst == nullptr || items[i].data == nullptr) {
          out[i] = dst == nullptr ? Status::Internal("unaddressable extent")
                                  : Status::InvalidArgument("null data");
          if (p.abort == nullptr) p.abort = messages.New<wire::Request>();
          p.abort->mutable_abort()->add_reservation_ids(reservation);
          continue;
        }
        sum = CopyAndChecksum(dst, items[i].data, items[i].size, CopyTarget::kFresh);
      }
      if (p.commit == nullptr) p.commit = messages.New<wire::Request>();
      auto* c = p.commit->mutable_commit()->add_items();
      c->set_reservation_id(reservation);
      c->set_checksum(sum);
      p.in_commit.push_back(i);
    }
    if (p.abort != nullptr) {
      p.aborted = messages.New<wire::Response>();
      p.abort_sent = one_call ? exchange.Call(*p.abort, p.aborted) : exchange.Send(*p.abort);
    }
    if (p.commit != nullptr) {
      p.committed = messages.New<wire::Response>();
      p.commit_sent = one_call ? exchange.Call(*p.commit, p.committed) : exchange.Send(*p.commit);
    }
  }

  // Phase three: the replies to the aborts and commits, in the order they were sent (a batch
  // in one part has them already).
  for (Part& p : parts) {
    if (p.abort != nullptr && p.abort_sent.ok() && !one_call) {
      (void)exchange.Receive(*p.abort, p.aborted);
    }
    if (p.commit == nullptr) continue;
    Status s = one_call             ? p.commit_sent
               : p.commit_sent.ok() ? exchange.Receive(*p.commit, p.committed)
                                    : p.commit_sent;
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
  const std::vector<Range> ranges =
      PartsOf(items, core_->options.ns, *conn->conn, kOneCallGetBytes);
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
    FillGetKeys(core_->options.ns, items, p.begin, p.end, conn->packed_gets, get);
    get->set_mode(core_->copy_only() ? wire::INLINE : wire::AUTO);
    get->set_bytes_meta_only(true);  // read here: size and checksum
    get->set_packed_results(conn->packed_get_results);
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
    const wire::GetReply& reply = p.got->get();
    if (s.ok() && !detail::GetReplyAnswers(reply, p.end - p.begin)) {
      s = Status::Internal("bad get reply");
    }
    if (!s.ok()) {
      for (std::size_t i = p.begin; i < p.end; ++i) out.emplace_back(s);
      continue;
    }
    const wire::PackedGetResults& pins = reply.packed();
    detail::ReplyOrder order(pins.positions(), pins.sizes_size() > 0);
    for (std::size_t i = p.begin; i < p.end; ++i) {
      const GetItem& it = items[i];
      int at;
      std::uint64_t size, checksum, lease;
      const void* src = nullptr;
      if (order.Plain(i - p.begin, &at)) {
        const auto& r = reply.items(at);
        Status st = FromWire(r.status());
        if (!st.ok()) {
          out.emplace_back(st);
          continue;
        }
        size = r.meta().size();
        checksum = r.meta().checksum();
        lease = r.lease_id();
        if (r.has_data()) {
          src = r.data().data();
        } else if (size > 0) {
          src = conn->mappings->ReadAddress(r.extent());
          if (src == nullptr) size = kUnaddressable;
        }
      } else {
        size = pins.sizes(at);
        checksum = pins.checksums(at);
        lease = pins.lease_ids(at);
        if (size > 0) {
          src = conn->mappings->ReadAddress(pins.arena_ids(at), pins.offsets(at), pins.lengths(at));
          if (src == nullptr) size = kUnaddressable;
        }
      }
      if (lease != 0) release.mutable_release()->add_lease_ids(lease);
      if (size == kUnaddressable) {
        out.emplace_back(Status::Internal("server returned an extent this client cannot address"));
        continue;
      }
      if (size > it.capacity) {
        out.emplace_back(TooSmall(it.key, it.capacity, size));
        continue;
      }
      if (size > 0) {
        if (core_->options.verify_checksums) {
          if (CopyAndChecksum(it.buffer, src, size) != checksum) {
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
