// Round trips through a real tierpoold: every size, every path, bytes and checksums compared.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include "tests/e2e/server_process.h"
#include "transport/blocking_connection.h"

namespace tierpool::testing {
namespace {

class RoundTrip : public ::testing::TestWithParam<std::size_t> {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--dram", "256M", "--hbm", "128M"}); }
  static void TearDownTestSuite() { delete server_; }
  static ServerProcess* server_;
};
ServerProcess* RoundTrip::server_ = nullptr;

TEST_P(RoundTrip, CopyAndZeroCopyPathsReturnTheSameBytes) {
  ASSERT_TRUE(server_->started());
  const std::size_t size = GetParam();
  auto client = server_->Connect();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Client& c = **client;
  const std::string key = "rt-" + std::to_string(size);
  const std::string bytes = Pattern(1, size);
  const std::uint64_t want = XXH3_64bits(bytes.data(), bytes.size());

  // Copy in, copy out.
  ASSERT_TRUE(c.Put(key, bytes.data(), size).ok());
  std::string out(size, '\0');
  auto got = c.Get(key, out.data(), out.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, size);
  EXPECT_TRUE(out == bytes);
  auto meta = c.Stat(key);
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->size, size);
  EXPECT_EQ(meta->checksum, want);

  // Zero copy out.
  {
    auto view = c.GetView(key);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    ASSERT_EQ(view->size(), size);
    EXPECT_TRUE(size == 0 || std::memcmp(view->data(), bytes.data(), size) == 0);
    EXPECT_TRUE(view->Verify().ok());
  }

  // Reserve, write in place, commit; then read back through the other path.
  const std::string bytes2 = Pattern(2, size);
  {
    auto r = c.Reserve(key, size);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (size > 0) std::memcpy(r->data(), bytes2.data(), size);
    ASSERT_TRUE(r->Commit().ok());
  }
  out.assign(size, '\0');
  ASSERT_TRUE(c.Get(key, out.data(), out.size()).ok());
  EXPECT_TRUE(out == bytes2);
  EXPECT_EQ(c.Stat(key)->checksum, XXH3_64bits(bytes2.data(), size));

  // Into hbm and back out.
  ASSERT_TRUE(c.Promote(key, TierKind::kHbm).ok());
  EXPECT_EQ(c.Stat(key)->tier, TierKind::kHbm);
  auto view = c.GetView(key);
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(view->Verify().ok());
  view->Release();
  ASSERT_TRUE(c.Delete(key).ok());
  EXPECT_EQ(c.Stat(key).status().code(), StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Sizes, RoundTrip,
                         ::testing::Values(0, 1, 4096, 64 * 1024 + 1, 64 * 1024 * 1024),
                         [](const auto& p) { return "bytes_" + std::to_string(p.param); });

TEST(RoundTripBatch, SixtyFourBlocksInOneCall) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  std::vector<std::string> data;
  std::vector<PutItem> puts;
  for (int i = 0; i < 64; ++i) data.push_back(Pattern(static_cast<std::uint64_t>(i), 4096));
  for (int i = 0; i < 64; ++i) {
    PutOptions o;
    o.kind = ObjectKind::kKvBlock;
    o.durability = Durability::kCache;
    puts.push_back({"blk" + std::to_string(i), data[static_cast<std::size_t>(i)].data(), 4096, o});
  }
  for (const auto& s : (*client)->PutBatch(puts)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<std::string> out(64, std::string(4096, '\0'));
  std::vector<GetItem> gets;
  for (int i = 0; i < 64; ++i) {
    gets.push_back({"blk" + std::to_string(i), out[static_cast<std::size_t>(i)].data(), 4096});
  }
  gets.push_back({"missing", nullptr, 0});
  auto results = (*client)->GetBatch(gets);
  ASSERT_EQ(results.size(), 65u);
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(results[static_cast<std::size_t>(i)].ok());
    EXPECT_TRUE(out[static_cast<std::size_t>(i)] == data[static_cast<std::size_t>(i)]);
  }
  EXPECT_EQ(results[64].status().code(), StatusCode::kNotFound);
  auto list = (*client)->List("blk");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 64u);
  EXPECT_EQ(list->front().kind, ObjectKind::kKvBlock);
}

// A batch part whose items share every option goes packed (one PutSpec for all,
// ReserveRequest.packed); one whose items differ goes item by item. Either way each object keeps
// its own key, size, kind, durability, dtype and shape.
TEST(RoundTripBatch, EachObjectKeepsItsOptionsPackedOrNot) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  PutOptions kv;
  kv.kind = ObjectKind::kKvBlock;
  kv.durability = Durability::kCache;
  kv.dtype = "float16";
  kv.shape = {2, 1024};
  PutOptions other;
  other.dtype = "int8";
  std::vector<std::string> data;
  for (int i = 0; i < 128; ++i) {
    data.push_back(Pattern(static_cast<std::uint64_t>(i), 1000 + static_cast<std::size_t>(i)));
  }
  // alike-*: 64 items, one options for all (two packed parts); mixed-*: 64 items whose options
  // alternate (two parts sent item by item).
  std::vector<PutItem> alike, mixed;
  for (int i = 0; i < 64; ++i) {
    const auto& a = data[static_cast<std::size_t>(i)];
    const auto& m = data[static_cast<std::size_t>(64 + i)];
    alike.push_back({"alike-" + std::to_string(i), a.data(), a.size(), kv});
    mixed.push_back({"mixed-" + std::to_string(i), m.data(), m.size(), i % 2 ? kv : other});
  }
  for (const auto& st : (*client)->PutBatch(alike)) ASSERT_TRUE(st.ok()) << st.ToString();
  for (const auto& st : (*client)->PutBatch(mixed)) ASSERT_TRUE(st.ok()) << st.ToString();
  for (const char* prefix : {"alike-", "mixed-"}) {
    auto list = (*client)->List(prefix);
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    ASSERT_EQ(list->size(), 64u) << prefix;
    for (const ObjectMeta& m : *list) {
      const int i = std::stoi(m.key.substr(std::strlen(prefix)));
      const bool is_kv = prefix[0] == 'a' || i % 2 == 1;
      const PutOptions& o = is_kv ? kv : other;
      const std::size_t at = static_cast<std::size_t>((prefix[0] == 'a' ? 0 : 64) + i);
      EXPECT_EQ(m.size, data[at].size()) << m.key;
      EXPECT_EQ(m.kind, o.kind) << m.key;
      EXPECT_EQ(m.durability, o.durability) << m.key;
      EXPECT_EQ(m.dtype, o.dtype) << m.key;
      EXPECT_EQ(m.shape, o.shape) << m.key;
      std::string back(data[at].size(), '\0');
      ASSERT_TRUE((*client)->Get(m.key, back.data(), back.size()).ok()) << m.key;
      EXPECT_TRUE(back == data[at]) << m.key;
    }
  }
}

// A batch of 32 or more goes in two parts pipelined on one connection (puts always, gets without
// a request ring or of many bytes: SmallBatchesGoWholeThroughTheRing): both reserves
// (gets) sent at once, each part copied and committed as its reply comes. Errors stay with
// their item, and the connection is left with no reply unread.
TEST(RoundTripBatch, LargeBatchesArePipelinedInTwoParts) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  ClientOptions options = server.options();
  options.max_connections = 1;
  options.request_ring = false;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  auto counter = [&](std::string_view name) { return ServerCounter(c, name); };
  constexpr int kItems = 65;
  std::vector<std::string> data;
  std::vector<PutItem> puts;
  for (int i = 0; i < kItems; ++i) data.push_back(Pattern(static_cast<std::uint64_t>(i), 4096));
  for (int i = 0; i < kItems; ++i) {
    puts.push_back({"p" + std::to_string(i), data[static_cast<std::size_t>(i)].data(), 4096, {}});
  }
  puts[5].key = std::string(5000, 'k');  // refused by the server, in the first part
  puts[40].data = nullptr;               // no bytes, in the second part: its room is aborted
  puts[50].size = 0;                     // an empty object
  data[50].clear();
  std::uint64_t frames = counter("requests");
  auto statuses = c.PutBatch(puts);
  // Two reserves, an abort and two commits (and the stat after).
  EXPECT_EQ(counter("requests") - frames, 6u);
  ASSERT_EQ(statuses.size(), static_cast<std::size_t>(kItems));
  for (int i = 0; i < kItems; ++i) {
    if (i == 5 || i == 40) {
      EXPECT_EQ(statuses[static_cast<std::size_t>(i)].code(), StatusCode::kInvalidArgument) << i;
    } else {
      EXPECT_TRUE(statuses[static_cast<std::size_t>(i)].ok())
          << i << ": " << statuses[i].ToString();
    }
  }
  EXPECT_EQ(counter("reservations_open"), 0u);

  std::vector<std::string> out(kItems, std::string(4096, '\0'));
  std::vector<GetItem> gets;
  for (int i = 0; i < kItems; ++i) {
    gets.push_back(
        {puts[static_cast<std::size_t>(i)].key, out[static_cast<std::size_t>(i)].data(), 4096});
  }
  frames = counter("requests");
  auto results = c.GetBatch(gets);
  EXPECT_EQ(counter("requests") - frames, 4u);  // two gets, one release, the stat
  ASSERT_EQ(results.size(), static_cast<std::size_t>(kItems));
  for (int i = 0; i < kItems; ++i) {
    const auto& r = results[static_cast<std::size_t>(i)];
    if (i == 5) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);  // the key is too long
    } else if (i == 40) {
      EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    } else {
      ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
      ASSERT_EQ(*r, data[static_cast<std::size_t>(i)].size());
      EXPECT_EQ(out[static_cast<std::size_t>(i)].substr(0, *r), data[static_cast<std::size_t>(i)])
          << i;
    }
  }
  EXPECT_TRUE(server.WaitFor([](const ServerStats& st) { return st.counter("leases_open") == 0; }));
  // Requests too large to be sure of the socket's buffer together go one after the other: 140
  // keys of 1000 bytes make reserves of some 150 KiB.
  std::vector<PutItem> long_keys;
  for (int i = 0; i < 140; ++i) {
    std::string key = std::to_string(i) + "-" + std::string(1000, 'k');
    key.resize(1000);
    const std::string& bytes = data[static_cast<std::size_t>(i % kItems)];
    long_keys.push_back({key, (bytes.size() == 4096 ? bytes : data[0]).data(), 4096, {}});
  }
  frames = counter("requests");
  for (const auto& st : c.PutBatch(long_keys)) EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(counter("requests") - frames, 3u);  // one reserve, one commit, the stat
  std::vector<std::string> back_long(long_keys.size(), std::string(4096, '\0'));
  std::vector<GetItem> long_gets;
  for (std::size_t i = 0; i < long_keys.size(); ++i) {
    long_gets.push_back({long_keys[i].key, back_long[i].data(), 4096});
  }
  frames = counter("requests");
  auto long_results = c.GetBatch(long_gets);
  EXPECT_EQ(counter("requests") - frames, 3u);  // one get, one release, the stat
  for (std::size_t i = 0; i < long_keys.size(); ++i) {
    ASSERT_TRUE(long_results[i].ok()) << i;
    EXPECT_EQ(std::memcmp(back_long[i].data(), long_keys[i].data, 4096), 0) << i;
  }

  // The connection carries on: no reply was left unread.
  ASSERT_TRUE(c.Put("after", data[0].data(), data[0].size()).ok());
  std::string back(4096, '\0');
  ASSERT_TRUE(c.Get("after", back.data(), back.size()).ok());
  EXPECT_TRUE(back == data[0]);
}

// On a connection with a request ring, a get batch of few bytes goes whole through it (one get
// and its release), where the socket's pipelining would cost more round trips than its overlap
// saves; a put batch goes through it when it is in one part anyway (fewer than 32 items: a call
// for its room and one for its commit). Larger batches are pipelined on the socket as before.
TEST(RoundTripBatch, SmallBatchesGoWholeThroughTheRing) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  ClientOptions options = server.options();
  options.max_connections = 1;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  ASSERT_EQ(ServerCounter(c, "request_rings_open"), 1u);
  // Requests of every kind and those of them through the ring, from one stat (which counts
  // itself).
  auto counts = [&] {
    auto st = c.ServerStat();
    EXPECT_TRUE(st.ok());
    if (!st.ok()) return std::pair<std::uint64_t, std::uint64_t>{};
    return std::pair{ServerCounter(*st, "requests"), ServerCounter(*st, "ring_requests")};
  };
  struct Shape {
    int items;
    std::uint64_t size;
  };
  for (Shape shape : {Shape{16, 4096}, Shape{64, 4096}, Shape{64, 16384}}) {
    const std::string name = std::to_string(shape.items) + " x " + std::to_string(shape.size);
    std::vector<std::string> data, out;
    std::vector<PutItem> puts;
    std::vector<GetItem> gets;
    for (int i = 0; i < shape.items; ++i) data.push_back(Pattern(shape.size + i, shape.size));
    out.assign(static_cast<std::size_t>(shape.items), std::string(shape.size, '\0'));
    for (int i = 0; i < shape.items; ++i) {
      const std::string key = "s" + name + "-" + std::to_string(i);
      puts.push_back({key, data[static_cast<std::size_t>(i)].data(), shape.size, {}});
      gets.push_back({key, out[static_cast<std::size_t>(i)].data(), shape.size});
    }
    auto before = counts();
    for (const Status& st : c.PutBatch(puts)) ASSERT_TRUE(st.ok()) << name << ": " << st.ToString();
    auto after = counts();
    // A reserve and a commit through the ring; else two of each on the socket (the stat that
    // counted them is through the ring).
    const bool put_whole = shape.items < 32;
    EXPECT_EQ(after.first - before.first, put_whole ? 3u : 5u) << name;
    EXPECT_EQ(after.second - before.second, put_whole ? 3u : 1u) << name;
    before = after;
    auto results = c.GetBatch(gets);
    for (int i = 0; i < shape.items; ++i) {
      const auto& r = results[static_cast<std::size_t>(i)];
      ASSERT_TRUE(r.ok()) << name << "/" << i << ": " << r.status().ToString();
      EXPECT_TRUE(out[static_cast<std::size_t>(i)] == data[static_cast<std::size_t>(i)]) << i;
    }
    after = counts();
    // Gets of up to 512 KiB: one get and its release, through the ring; the 1 MiB batch's two
    // gets pipelined on the socket, their release in the ring.
    const bool get_whole = shape.items * shape.size <= 512 * 1024;
    EXPECT_EQ(after.first - before.first, get_whole ? 3u : 4u) << name;
    EXPECT_EQ(after.second - before.second, get_whole ? 3u : 2u) << name;
  }
  EXPECT_TRUE(server.WaitFor([](const ServerStats& st) { return st.counter("leases_open") == 0; }));
}

// A WriteReservation commits on its connection outside any borrow: its round trip must never
// come between a pipelined batch's request and that request's reply on the same connection.
TEST(RoundTripBatch, APipelinedBatchAndAReservationCommittedElsewhereShareAConnection) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  ClientOptions options = server.options();
  options.max_connections = 1;  // the batches and the reservations on one connection
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  const std::string bytes = Pattern(3, 4096), big = Pattern(4, 64 * 1024);
  std::vector<PutItem> puts;
  for (int i = 0; i < 64; ++i) puts.push_back({"b" + std::to_string(i), bytes.data(), 4096, {}});
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> committers;
  for (int t = 0; t < 3; ++t) {
    committers.emplace_back([&, t] {
      for (int i = 0; i < 3000 && !stop; ++i) {
        auto r = c.Reserve("r" + std::to_string(t) + "-" + std::to_string(i % 8), big.size());
        if (!r.ok()) {
          ++failures;
          continue;
        }
        std::memcpy(r->data(), big.data(), big.size());
        if (!r->Commit().ok()) ++failures;
      }
    });
  }
  for (int round = 0; round < 3000; ++round) {
    for (const auto& st : c.PutBatch(puts)) {
      if (!st.ok()) ++failures;
    }
  }
  stop = true;
  for (auto& t : committers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// A batch whose requests would not fit in the socket's buffer together is not pipelined: the
// client would block sending the second while the server blocks writing the first's reply (it
// reads a connection's next request only after its reply is out). 4000 gets of 1000-byte keys
// that do not exist: each reply names every key, some 2 MiB a part. Pipelined, this hung.
TEST(RoundTripBatch, RequestsTooLargeForTheSocketBufferAreNotPipelined) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  std::vector<GetItem> gets;
  for (int i = 0; i < 4000; ++i) {
    std::string key = std::to_string(i) + "-" + std::string(1000, 'k');
    key.resize(1000);
    gets.push_back({key, nullptr, 0});
  }
  auto done = std::async(std::launch::async, [&] { return (*client)->GetBatch(gets); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the batch did not finish: client and server each waiting on the other";
  auto results = done.get();
  ASSERT_EQ(results.size(), gets.size());
  for (const auto& r : results) EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// A connection of the protocol's own, past its Hello (request id 1), for requests the client
// library does not make.
Result<std::unique_ptr<transport::BlockingConnection>> HelloConnection(
    const ServerProcess& server) {
  auto raw = transport::BlockingConnection::Connect(server.socket());
  if (!raw.ok()) return raw.status();
  wire::Request hello;
  hello.set_id(1);
  hello.mutable_hello()->set_protocol_version(transport::kProtocolVersion);
  wire::Response r;
  std::vector<UniqueFd> fds;
  TIERPOOL_RETURN_IF_ERROR((*raw)->Call(hello, &r, &fds));
  return raw;
}

// AUTO carries at most the inline threshold's worth of bytes per reply (8 KiB by default): one
// small object inline, a batch of them mostly pinned (read from the mapping, 2x faster for
// 64 x 4 KiB than through the socket). Before: every object up to 64 KiB was inline.
TEST(RoundTripBatch, AutoGetsInlineAtMostTheThresholdPerReply) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 4; ++i) {
    const std::string bytes = Pattern(static_cast<std::uint64_t>(i), 4096);
    ASSERT_TRUE((*client)->Put("b" + std::to_string(i), bytes.data(), bytes.size()).ok());
  }
  const std::string eight = Pattern(9, 8192), more = Pattern(10, 8193);
  ASSERT_TRUE((*client)->Put("eight", eight.data(), eight.size()).ok());
  ASSERT_TRUE((*client)->Put("more", more.data(), more.size()).ok());

  auto raw = HelloConnection(server);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  auto get = [&](std::vector<std::string> keys) {
    static std::uint64_t id = 2;
    wire::Request req;
    req.set_id(id++);
    for (const auto& k : keys) {
      auto* key = req.mutable_get()->add_keys();
      key->set_ns(server.options().ns);
      key->set_key(k);
    }
    req.mutable_get()->set_mode(wire::AUTO);
    wire::Response resp;
    EXPECT_TRUE((*raw)->Call(req, &resp).ok());
    std::vector<bool> inlined;
    for (const auto& item : resp.get().items()) {
      EXPECT_EQ(item.status().code(), 0u) << item.status().message();
      EXPECT_TRUE(item.has_data() != (item.lease_id() != 0));
      inlined.push_back(item.has_data());
    }
    return inlined;
  };
  EXPECT_EQ(get({"b0", "b1", "b2", "b3"}), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(get({"eight"}), std::vector<bool>{true});
  EXPECT_EQ(get({"more"}), std::vector<bool>{false});
  EXPECT_EQ(get({"eight", "b0"}), (std::vector<bool>{true, false}));
}

// A get that asks for bytes_meta_only gets size, checksum and tier but no names, dtype or shape
// (the client knows the keys it asked for); one that does not gets the whole meta, as clients
// from before the field expect.
TEST(RoundTripBatch, AGetOfBytesMetaOnlyCarriesNoNames) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  const std::string key = "layer-17/kv-block-000000000042";
  const std::string bytes = Pattern(3, 4096);
  PutOptions po;
  po.dtype = "float16";
  po.shape = {2, 1024};
  ASSERT_TRUE((*client)->Put(key, bytes.data(), bytes.size(), po).ok());

  auto raw = HelloConnection(server);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  std::uint64_t id = 2;
  auto get = [&](wire::GetMode mode, bool bytes_meta_only) {
    wire::Request req;
    req.set_id(id++);
    auto* k = req.mutable_get()->add_keys();
    k->set_ns(server.options().ns);
    k->set_key(key);
    req.mutable_get()->set_mode(mode);
    req.mutable_get()->set_bytes_meta_only(bytes_meta_only);
    wire::Response resp;
    EXPECT_TRUE((*raw)->Call(req, &resp).ok());
    EXPECT_EQ(resp.get().items_size(), 1);
    wire::GetResult item = resp.get().items(0);
    EXPECT_EQ(item.status().code(), 0u) << item.status().message();
    if (item.lease_id() != 0) {
      wire::Request release;
      release.set_id(id++);
      release.mutable_release()->add_lease_ids(item.lease_id());
      EXPECT_TRUE((*raw)->SendOneWay(release).ok());
    }
    return item;
  };
  for (wire::GetMode mode : {wire::AUTO, wire::INLINE, wire::PINNED}) {
    SCOPED_TRACE(wire::GetMode_Name(mode));
    const wire::GetResult lean = get(mode, true);
    EXPECT_TRUE(lean.meta().ns().empty());
    EXPECT_TRUE(lean.meta().key().empty());
    EXPECT_TRUE(lean.meta().dtype().empty());
    EXPECT_EQ(lean.meta().shape_size(), 0);
    EXPECT_EQ(lean.meta().size(), bytes.size());
    EXPECT_EQ(lean.meta().checksum(), XXH3_64bits(bytes.data(), bytes.size()));
    EXPECT_EQ(lean.meta().tier(), wire::DRAM);
    if (mode == wire::INLINE) {
      EXPECT_EQ(lean.data(), bytes);
    }
    const wire::GetResult whole = get(mode, false);
    EXPECT_EQ(whole.meta().ns(), server.options().ns);
    EXPECT_EQ(whole.meta().key(), key);
    EXPECT_EQ(whole.meta().dtype(), "float16");
    EXPECT_EQ(whole.meta().shape_size(), 2);
  }
  // The client's gets ask for it, and read the same bytes.
  std::string out(bytes.size(), '\0');
  auto got = (*client)->Get(key, out.data(), out.size());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(out, bytes);
}

// After two puts in a row up to 4 MiB, the connection asks the server to stage room for the next
// within the second's commit; the next put that fits copies into it and names it in its commit:
// one round trip (ClientOptions::stage_puts). Before: every put above the inline threshold was
// reserve, then commit.
TEST(StagedPuts, ARunOfPutsTakesOneRoundTripForEachPutTheRoomHolds) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  ClientOptions options = server.options();
  options.max_connections = 1;  // every put on the connection that staged
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  Client& c = **client;
  auto counter = [&](std::string_view name) { return ServerCounter(c, name); };
  const std::size_t size = 64 * 1024 + 1;
  PutOptions kv{.dtype = "float16", .shape = {8, 4096}, .kind = ObjectKind::kKvBlock};
  const std::string a = Pattern(1, size), b = Pattern(2, size), b2 = Pattern(3, size);
  ASSERT_TRUE(c.Put("a", a.data(), size).ok());
  EXPECT_EQ(counter("reservations_staged"), 0u);  // one put of a size stages nothing
  ASSERT_TRUE(c.Put("b", b.data(), size, kv).ok());
  EXPECT_EQ(counter("reservations_staged"), 1u);
  EXPECT_EQ(counter("staged_commits"), 0u);
  ASSERT_TRUE(c.Put("b", b2.data(), size).ok());  // a replacement, through the staged room
  EXPECT_EQ(counter("staged_commits"), 1u);
  EXPECT_EQ(counter("reservations_open"), 1u);  // the room for the next one
  std::string out(size, '\0');
  ASSERT_TRUE(c.Get("a", out.data(), size).ok());
  EXPECT_TRUE(out == a);
  ASSERT_TRUE(c.Get("b", out.data(), size).ok());
  EXPECT_TRUE(out == b2);
  ASSERT_TRUE(c.Put("kv", b.data(), size, kv).ok());
  EXPECT_EQ(counter("staged_commits"), 2u);
  auto meta = c.Stat("kv");
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->kind, ObjectKind::kKvBlock);
  EXPECT_EQ(meta->dtype, "float16");
  EXPECT_EQ(meta->shape, kv.shape);

  // A larger put does not fit the room: it gives the room back in its reserve, and its commit
  // stages room as large as it (the largest of the run's last puts).
  const std::string big = Pattern(4, 2 * size);
  ASSERT_TRUE(c.Put("big", big.data(), big.size()).ok());
  EXPECT_EQ(counter("staged_commits"), 2u);
  EXPECT_EQ(counter("reservations_open"), 1u);
  // A smaller reservation takes that room (no round trip until its commit), the rest going
  // back to the tier; its commit stages the run's largest again, which the next big put takes.
  auto r = c.Reserve("explicit", 4096 * 4);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->Commit().ok());
  EXPECT_EQ(counter("staged_commits"), 3u);
  ASSERT_TRUE(c.Put("big", big.data(), big.size()).ok());
  EXPECT_EQ(counter("staged_commits"), 4u);
  EXPECT_EQ(counter("reservations_open"), 1u);

  // A zero-copy reservation of a staged size takes the room without a round trip; its commit
  // names it and stages the next.
  {
    auto z = c.Reserve("zero-copy", big.size());
    ASSERT_TRUE(z.ok());
    std::memcpy(z->data(), big.data(), big.size());
    ASSERT_TRUE(z->Commit().ok());
    EXPECT_EQ(counter("staged_commits"), 5u);
    std::string back(big.size(), '\0');
    ASSERT_TRUE(c.Get("zero-copy", back.data(), back.size()).ok());
    EXPECT_TRUE(back == big);
  }
  {
    auto dropped = c.Reserve("dropped", big.size());  // staged room, given back unused
    ASSERT_TRUE(dropped.ok());
    ASSERT_TRUE(dropped->Abort().ok());
    EXPECT_EQ(counter("reservations_open"), 0u);
  }
  ASSERT_TRUE(c.Put("big", big.data(), big.size()).ok());  // stages again
  {
    // A name the server refuses, found at the commit that names staged room: an error, and
    // the room is freed.
    auto bad = c.Reserve(std::string(5000, 'k'), big.size());
    ASSERT_TRUE(bad.ok());
    EXPECT_EQ(bad->Commit().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(counter("reservations_open"), 1u);  // only the room that commit staged
  }

  // Sizes that vary: the room staged is the largest of the run's last four puts, and a put it
  // holds takes it, the rest of the room going back. Sizes that grow at every put find the room
  // too small (given back in their reserve); shrinking ones fit.
  // (A put above 4 MiB ends a run and gives back the room staged so far.)
  const std::string huge = Pattern(5, (4 << 20) + 4096);
  ASSERT_TRUE(c.Put("huge", huge.data(), huge.size()).ok());
  EXPECT_EQ(counter("reservations_open"), 0u);
  const std::uint64_t commits = counter("staged_commits");
  for (std::size_t n = 1; n <= 4; ++n) {
    ASSERT_TRUE(c.Put("growing", big.data(), size + n * 4096).ok());
  }
  EXPECT_EQ(counter("staged_commits"), commits);
  for (std::size_t n = 4; n >= 1; --n) {
    const std::string bytes = Pattern(static_cast<int>(10 + n), size + n * 4096);
    ASSERT_TRUE(c.Put("shrinking", bytes.data(), bytes.size()).ok());
    std::string back(bytes.size(), '\0');
    ASSERT_TRUE(c.Get("shrinking", back.data(), back.size()).ok());
    EXPECT_TRUE(back == bytes) << n;
    auto shrunk = c.Stat("shrinking");
    ASSERT_TRUE(shrunk.ok());
    EXPECT_EQ(shrunk->size, bytes.size());
  }
  EXPECT_EQ(counter("staged_commits"), commits + 4);
  EXPECT_EQ(counter("reservations_open"), 1u);  // the room for the next one
  const std::uint64_t staged = counter("reservations_staged");

  // Without staging, no room is held between puts.
  options.stage_puts = false;
  auto plain = Client::Connect(options);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE((*plain)->Put("p", a.data(), size).ok());
  ASSERT_TRUE((*plain)->Put("q", a.data(), size).ok());
  ASSERT_TRUE((*plain)->Put("r", a.data(), size).ok());
  EXPECT_EQ(counter("reservations_staged"), staged);
  // A closed connection's staged room is freed.
  client->reset();
  EXPECT_TRUE(
      server.WaitFor([](const ServerStats& s) { return s.counter("reservations_open") == 0; }));
}

// The server reads its socket ahead (transport/unix_session.cc): one recv may hold several
// frames, a frame's header without its body, or the start of a body larger than what it reads
// ahead. Frames sent back to back, in one write and in pieces cut anywhere, are each served
// once, in order, with the bytes they carried.
TEST(RoundTripFrames, FramesInOneWriteOrCutAnywhereAreEachServedInOrder) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto raw = HelloConnection(server);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  const std::string ns = server.options().ns;
  std::uint64_t id = 2;
  // Puts of a small, a large (past the 16 KiB read ahead) and a small object, then one get of
  // the three: each its own frame, all in one string.
  auto frames = [&](const std::string& prefix, const std::vector<std::string>& objects,
                    std::vector<std::uint64_t>* ids) {
    std::string stream;
    auto add = [&](wire::Request& req) {
      req.set_id(id);
      ids->push_back(id++);
      auto frame = transport::EncodeFrame(req, transport::kDefaultMaxFrameBytes);
      ASSERT_TRUE(frame.ok());
      stream += *frame;
    };
    for (std::size_t i = 0; i < objects.size(); ++i) {
      wire::Request put;
      auto* item = put.mutable_put_inline()->add_items();
      item->mutable_spec()->set_ns(ns);
      item->mutable_spec()->set_key(prefix + std::to_string(i));
      item->mutable_spec()->set_size(objects[i].size());
      item->set_data(objects[i]);
      item->set_checksum(XXH3_64bits(objects[i].data(), objects[i].size()));
      add(put);
    }
    wire::Request get;
    for (std::size_t i = 0; i < objects.size(); ++i) {
      auto* key = get.mutable_get()->add_keys();
      key->set_ns(ns);
      key->set_key(prefix + std::to_string(i));
    }
    get.mutable_get()->set_mode(wire::INLINE);
    add(get);
    return stream;
  };
  auto check_replies = [&](const std::vector<std::uint64_t>& ids,
                           const std::vector<std::string>& objects) {
    for (std::size_t k = 0; k < ids.size(); ++k) {
      wire::Response r;
      ASSERT_TRUE((*raw)->Receive(&r).ok());
      ASSERT_EQ(r.id(), ids[k]) << "reply " << k;
      ASSERT_EQ(r.status().code(), 0u) << r.status().message();
      if (k < objects.size()) {
        ASSERT_EQ(r.statuses().items_size(), 1);
        EXPECT_EQ(r.statuses().items(0).code(), 0u) << r.statuses().items(0).message();
        continue;
      }
      ASSERT_EQ(r.get().items_size(), static_cast<int>(objects.size()));
      for (std::size_t i = 0; i < objects.size(); ++i) {
        EXPECT_EQ(r.get().items(static_cast<int>(i)).data(), objects[i]) << "object " << i;
      }
    }
  };
  const std::vector<std::string> objects = {Pattern(1, 100), Pattern(2, 40 << 10), Pattern(3, 300)};
  {
    std::vector<std::uint64_t> ids;
    const std::string stream = frames("whole", objects, &ids);
    ASSERT_TRUE((*raw)->SendRaw(stream.data(), stream.size()).ok());
    check_replies(ids, objects);
  }
  {
    // Cut into pieces of 1 to 13 bytes and of 3,000, each sent after a pause long enough for
    // the server to have read the one before.
    std::vector<std::uint64_t> ids;
    const std::string stream = frames("cut", objects, &ids);
    const std::size_t sizes[] = {1, 5, 13, 3000, 7, 2, 11, 3000, 3};
    std::size_t at = 0;
    for (int n = 0; at < stream.size(); ++n) {
      const std::size_t piece = std::min(sizes[n % std::size(sizes)], stream.size() - at);
      ASSERT_TRUE((*raw)->SendRaw(stream.data() + at, piece).ok());
      at += piece;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    check_replies(ids, objects);
  }
}

}  // namespace
}  // namespace tierpool::testing
