// No request waits on the server's I/O thread (common/no_wait_scope.h): where the snapshot that
// sent it there was wrong, the store gives up at once with nothing reserved, pinned or counted,
// and the service stops at that item, so that a worker carries the request on from there; a
// client whose request is waiting for room does not hold up another client's get.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "common/checksum.h"
#include "common/no_wait_scope.h"
#include "store/object_store.h"
#include "store/service.h"
#include "tiers/dram_tier.h"
#include "tiers/nvme_tier.h"
#include "transport/blocking_connection.h"
#include "transport/unix_server.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kOwner = 7;
using Clock = std::chrono::steady_clock;
// How long each nvme transfer takes once the test slows them down, and the most a call that must
// not wait may take: far apart, so that a loaded CI machine does not blur them.
constexpr std::uint32_t kSlowUs = 1'000'000;
constexpr double kAtOnceMs = kSlowUs / 2000.0;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Rig {
  std::unique_ptr<ObjectStore> store;
  FaultInjectingIoBackend* faults = nullptr;
  std::vector<std::uint64_t> leases;  // the pins that fragment dram
};

// dram of `dram` bytes (watermarks out of the way: only allocation makes room) over an nvme tier
// in memory whose I/O the test can slow down.
Rig MakeRig(std::uint64_t dram) {
  Rig rig;
  std::vector<std::unique_ptr<Tier>> tiers;
  auto d = DramTier::Create({.capacity = dram, .populate = false});
  EXPECT_TRUE(d.ok());
  (*d)->set_watermarks({.high = 1.0, .low = 0.95});
  tiers.push_back(std::move(d).value());
  NvmeTierConfig nc;
  nc.backend = "memory";
  nc.capacity = 64 * kMiB;
  nc.files = 1;
  nc.io_size = 1 * kMiB;
  nc.queue_depth = 4;
  auto faults = std::make_unique<FaultInjectingIoBackend>(
      std::make_unique<MemoryIoBackend>(IoBackendConfig{.block_size = 4096, .queue_depth = 4},
                                        std::vector<std::uint64_t>{64 * kMiB}),
      1);
  rig.faults = faults.get();
  auto n = NvmeTier::Create(nc, std::move(faults));
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  tiers.push_back(std::move(n).value());
  auto s = ObjectStore::Create({}, std::move(tiers));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  rig.store = std::move(s).value();
  return rig;
}

std::string Bytes(int seed, std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed * 31 + i * 7);
  return s;
}

std::string Key(int i) { return "block-" + std::to_string(i); }

// The service as the transport runs a request (transport/unix_session.cc): on an I/O thread,
// where a wait is refused and the service stops, then on a worker, which carries it on.
class ServiceCalls {
 public:
  explicit ServiceCalls(StoreService& service) : service_(service) {}
  // On an I/O thread: true when the service refused a wait there.
  bool RefusedOnIoThread(const wire::Request& req, wire::Response* resp) {
    NoWaitScope no_wait;
    service_.Handle(kOwner, peer_, req, resp, &fds_);
    return no_wait.refused();
  }
  // On a worker, with the response as the I/O thread left it.
  void OnWorker(const wire::Request& req, wire::Response* resp) {
    service_.Handle(kOwner, peer_, req, resp, &fds_);
  }

 private:
  StoreService& service_;
  transport::PeerCredentials peer_{.pid = getpid(), .uid = getuid(), .gid = getgid()};
  std::vector<int> fds_;
};

// Eight 1 MiB objects into 4 MiB of dram: the first ones spill to nvme to make room for the later.
void FillPastDram(Rig& rig) {
  for (int i = 0; i < 8; ++i) {
    const std::string b = Bytes(i, kMiB);
    ASSERT_TRUE(
        rig.store->PutCopy({.ns = "ns", .key = Key(i), .size = kMiB}, b.data(), kOwner).ok());
  }
}

// Reserves of 1, 2 and 1 MiB ("one", "two", "three") packed in one message.
wire::Request PackedReserveOfThree() {
  wire::Request req;
  auto* packed = req.mutable_reserve()->mutable_packed();
  packed->mutable_spec()->set_ns("ns");
  for (auto [key, size] : {std::pair{"one", kMiB}, {"two", 2 * kMiB}, {"three", kMiB}}) {
    packed->mutable_keys()->append(key);
    packed->add_key_bytes(static_cast<std::uint32_t>(std::strlen(key)));
    packed->add_sizes(size);
  }
  return req;
}

// 16 MiB of dram in 1 MiB objects, then: the even ones pinned, the odd ones deleted but for the
// fourth. 7 MiB are free, in 1 MiB holes between pinned copies, so a 2 MiB put fits by the free
// bytes (the service's snapshot sends it to the I/O thread) but no window can be opened in the
// tier; the store moves the one movable copy down to nvme and waits for it.
void Fragment(Rig& rig) {
  for (int i = 0; i < 16; ++i) {
    const std::string b = Bytes(i, kMiB);
    ASSERT_TRUE(
        rig.store->PutCopy({.ns = "ns", .key = Key(i), .size = kMiB}, b.data(), kOwner).ok());
  }
  for (int i = 0; i < 16; i += 2) {
    auto p = rig.store->Pin("ns", Key(i), kOwner);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_EQ(p->extent.offset, static_cast<std::uint64_t>(i) * kMiB)
        << "the allocator did not lay the objects out in order; this test assumes it";
    rig.leases.push_back(p->lease_id);
  }
  for (int i = 1; i < 16; i += 2) {
    if (i == 3) continue;
    ASSERT_TRUE(rig.store->Delete("ns", Key(i)).ok());
  }
  // Every write to nvme (the movable copy's spill) takes this long.
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 1, .latency_us = kSlowUs});
}

TEST(IoThreadWaits, AReserveThatMustWaitForRoomGivesUpAtOnceOnAnIoThread) {
  Rig rig = MakeRig(16 * kMiB);
  Fragment(rig);
  ASSERT_FALSE(rig.store->ReserveMayWait("ns", 2 * kMiB, 2 * kMiB, false))
      << "the snapshot must send this put to the I/O thread for the test to mean anything";
  const StoreStats before = rig.store->Stats();
  {
    NoWaitScope no_wait;
    const auto started = Clock::now();
    auto r = rig.store->Reserve({.ns = "ns", .key = "big", .size = 2 * kMiB}, kOwner);
    EXPECT_LT(MsSince(started), kAtOnceMs);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(no_wait.refused());
  }
  EXPECT_FALSE(WaitRefused()) << "the scope's refusal outlived it";
  const StoreStats after = rig.store->Stats();
  EXPECT_EQ(after.reservations_open, before.reservations_open);
  EXPECT_EQ(after.resource_exhausted, before.resource_exhausted);
  // Off the I/O thread, the same put waits for the move it started, and then finds no window.
  const auto started = Clock::now();
  auto r = rig.store->Reserve({.ns = "ns", .key = "big", .size = 2 * kMiB}, kOwner);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_GT(MsSince(started), kAtOnceMs) << "it did not wait for the move";
  EXPECT_EQ(rig.store->Stats().reservations_open, before.reservations_open);
}

TEST(IoThreadWaits, AGetThatMustWaitForNvmeGivesUpAtOnceAndPinsNothing) {
  Rig rig = MakeRig(4 * kMiB);
  FillPastDram(rig);
  rig.store->Quiesce();
  auto copies = rig.store->CopiesOf("ns", Key(0));
  ASSERT_TRUE(copies.ok());
  ASSERT_EQ(*copies, std::vector<TierKind>{TierKind::kNvme});
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 1, .latency_us = kSlowUs});
  const StoreStats before = rig.store->Stats();
  {
    NoWaitScope no_wait;
    const auto started = Clock::now();
    auto p = rig.store->Pin("ns", Key(0), kOwner);
    EXPECT_LT(MsSince(started), kAtOnceMs);
    EXPECT_FALSE(p.ok());
    EXPECT_TRUE(no_wait.refused());
  }
  const StoreStats after = rig.store->Stats();
  EXPECT_EQ(after.leases_open, before.leases_open);
  EXPECT_EQ(after.gets, before.gets) << "a refused get was counted";
  std::string out;
  auto meta = rig.store->ReadCopy("ns", Key(0), &out);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(out, Bytes(0, kMiB));
}

// A get batch whose results are packed (GetRequest.packed_results) carries on the same way:
// the worker's call resumes at the item that would wait, after the bytes that came in the frame
// and the pin taken before it, neither done twice.
TEST(IoThreadWaits, APackedGetBatchCarriesOnFromTheItemThatWouldWait) {
  Rig rig = MakeRig(4 * kMiB);
  FillPastDram(rig);
  const std::string small = Bytes(9, 4096);  // comes in the frame (AUTO, within 8 KiB)
  ASSERT_TRUE(
      rig.store->PutCopy({.ns = "ns", .key = "small", .size = 4096}, small.data(), kOwner).ok());
  rig.store->Quiesce();
  auto copies = rig.store->CopiesOf("ns", Key(0));
  ASSERT_TRUE(copies.ok());
  ASSERT_EQ(*copies, std::vector<TierKind>{TierKind::kNvme});
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 1, .latency_us = kSlowUs});
  StoreService service(ServiceConfig{}, rig.store.get());
  ServiceCalls calls(service);
  wire::Request get;
  get.mutable_get()->set_mode(wire::AUTO);
  get.mutable_get()->set_bytes_meta_only(true);
  get.mutable_get()->set_packed_results(true);
  for (const std::string& key :
       {std::string("small"), Key(7), Key(0), Key(6), std::string("none")}) {
    auto* k = get.mutable_get()->add_keys();
    k->set_ns("ns");
    k->set_key(key);
  }
  wire::Response got;
  const std::uint64_t gets_before = rig.store->Stats().gets;
  const std::uint64_t misses_before = rig.store->Stats().get_misses;
  ASSERT_TRUE(calls.RefusedOnIoThread(get, &got));
  const wire::PackedGetResults& pins = got.get().packed();
  ASSERT_EQ(pins.sizes_size(), 1) << "it did not stop at the item that would wait";
  ASSERT_EQ(got.get().items_size(), 1);
  EXPECT_EQ(got.get().items(0).data(), small);
  const std::uint64_t first = pins.lease_ids(0);
  EXPECT_EQ(rig.store->Stats().leases_open, 1u);
  calls.OnWorker(get, &got);
  ASSERT_EQ(pins.sizes_size(), 3);
  ASSERT_EQ(got.get().items_size(), 2) << "the bytes in the frame were sent twice";
  EXPECT_EQ(std::vector<std::uint32_t>(pins.positions().begin(), pins.positions().end()),
            (std::vector<std::uint32_t>{0, 4}));
  EXPECT_EQ(got.get().items(1).status().code(), static_cast<int>(StatusCode::kNotFound));
  EXPECT_EQ(pins.lease_ids(0), first) << "the first pin was taken twice";
  EXPECT_EQ(rig.store->Stats().leases_open, 3u);
  // Key(6) and "none", looked up ahead on the I/O thread and let go when the batch stopped,
  // count once each.
  EXPECT_EQ(rig.store->Stats().gets, gets_before + 5) << "a get counted twice or not at all";
  EXPECT_EQ(rig.store->Stats().get_misses, misses_before + 1) << "a miss counted twice";
  for (int k = 0; k < 3; ++k) {
    const int key = std::vector<int>{7, 0, 6}[k];
    EXPECT_EQ(pins.sizes(k), kMiB);
    EXPECT_EQ(pins.checksums(k), Xxh3(Bytes(key, kMiB).data(), kMiB)) << key;
    EXPECT_TRUE(rig.store->Release(pins.lease_ids(k), kOwner).ok());
  }
}

// Reserves of 1, 2 and 1 MiB in a fragmented rig, in `req`: the service stops at the second,
// which would wait for room, and a second call, as the worker makes, carries on from it in the
// same response: the item before it is not done twice.
void ExpectTheReserveCarriedOnFromTheItemThatWouldWait(Rig& rig, StoreService& service,
                                                       const wire::Request& req) {
  ServiceCalls calls(service);
  wire::Response resp;
  ASSERT_TRUE(calls.RefusedOnIoThread(req, &resp));
  ASSERT_EQ(resp.reserve().items_size(), 1) << "it did not stop at the item that would wait";
  const std::uint64_t first = resp.reserve().items(0).reservation_id();
  EXPECT_NE(first, 0u);
  calls.OnWorker(req, &resp);
  ASSERT_EQ(resp.reserve().items_size(), 3);
  EXPECT_EQ(resp.reserve().items(0).reservation_id(), first) << "the first item was done twice";
  EXPECT_EQ(resp.reserve().items(1).status().code(),
            static_cast<int>(StatusCode::kResourceExhausted));
  EXPECT_NE(resp.reserve().items(2).reservation_id(), 0u);
  EXPECT_EQ(rig.store->Stats().reservations_open, 2u);
}

// The service stops at the refused item and a second call, as the worker makes, carries on from
// it in the same response: the items before it are not done twice.
TEST(IoThreadWaits, TheServiceCarriesABatchOnFromTheItemThatWouldWait) {
  Rig rig = MakeRig(16 * kMiB);
  Fragment(rig);
  StoreService service(ServiceConfig{}, rig.store.get());
  wire::Request req;
  for (auto [key, size] : {std::pair{"one", kMiB}, {"two", 2 * kMiB}, {"three", kMiB}}) {
    auto* item = req.mutable_reserve()->add_items();
    item->set_ns("ns");
    item->set_key(key);
    item->set_size(size);
  }
  ExpectTheReserveCarriedOnFromTheItemThatWouldWait(rig, service, req);
  if (HasFatalFailure()) return;

  // A batch of gets the same way: inline bytes before the refused key stay, once.
  rig.faults->ClearRules();
  rig.store->Quiesce();
  auto copies = rig.store->CopiesOf("ns", Key(3));
  ASSERT_TRUE(copies.ok());
  ASSERT_EQ(*copies, std::vector<TierKind>{TierKind::kNvme});
  rig.faults->AddRule({.kind = FaultKind::kLatency, .one_in = 1, .latency_us = kSlowUs});
  wire::Request get;
  get.mutable_get()->set_mode(wire::INLINE);
  for (int i : {2, 3, 6}) {
    auto* k = get.mutable_get()->add_keys();
    k->set_ns("ns");
    k->set_key(Key(i));
  }
  wire::Response got;
  ServiceCalls calls(service);
  const std::uint64_t gets_before = rig.store->Stats().gets;
  ASSERT_TRUE(calls.RefusedOnIoThread(get, &got));
  ASSERT_EQ(got.get().items_size(), 1);
  calls.OnWorker(get, &got);
  ASSERT_EQ(got.get().items_size(), 3);
  EXPECT_EQ(got.get().items(0).data(), Bytes(2, kMiB));
  EXPECT_EQ(got.get().items(1).data(), Bytes(3, kMiB));  // moved to nvme for the 2 MiB put
  EXPECT_EQ(got.get().items(2).data(), Bytes(6, kMiB));
  EXPECT_EQ(rig.store->Stats().gets, gets_before + 3) << "a get counted twice or not at all";
}

// The same for puts packed in one message (ReserveRequest.packed): the worker's call resumes at
// the packed item that would wait.
TEST(IoThreadWaits, TheServiceCarriesAPackedBatchOnFromTheItemThatWouldWait) {
  Rig rig = MakeRig(16 * kMiB);
  Fragment(rig);
  StoreService service(ServiceConfig{}, rig.store.get());
  ExpectTheReserveCarriedOnFromTheItemThatWouldWait(rig, service, PackedReserveOfThree());
}

// And with the results packed too (ReserveRequest.packed_results): the worker's call resumes
// after the packed room already answered, and the refused item is listed at its position.
TEST(IoThreadWaits, AReserveWithPackedResultsCarriesOnFromTheItemThatWouldWait) {
  Rig rig = MakeRig(16 * kMiB);
  Fragment(rig);
  StoreService service(ServiceConfig{}, rig.store.get());
  ServiceCalls calls(service);
  wire::Request req = PackedReserveOfThree();
  req.mutable_reserve()->set_packed_results(true);
  wire::Response resp;
  ASSERT_TRUE(calls.RefusedOnIoThread(req, &resp));
  const wire::PackedReserveResults& rooms = resp.reserve().packed();
  ASSERT_EQ(rooms.reservation_ids_size(), 1) << "it did not stop at the item that would wait";
  EXPECT_EQ(resp.reserve().items_size(), 0);
  const std::uint64_t first = rooms.reservation_ids(0);
  calls.OnWorker(req, &resp);
  ASSERT_EQ(rooms.reservation_ids_size(), 2);
  EXPECT_EQ(rooms.reservation_ids(0), first) << "the first item was done twice";
  EXPECT_NE(rooms.reservation_ids(1), 0u);
  EXPECT_EQ(rooms.lengths(0), kMiB);
  EXPECT_EQ(rooms.lengths(1), kMiB);
  ASSERT_EQ(resp.reserve().items_size(), 1);
  EXPECT_EQ(std::vector<std::uint32_t>(rooms.positions().begin(), rooms.positions().end()),
            std::vector<std::uint32_t>{1});
  EXPECT_EQ(resp.reserve().items(0).status().code(),
            static_cast<int>(StatusCode::kResourceExhausted));
  EXPECT_EQ(rig.store->Stats().reservations_open, 2u);
}

// Through a real server with one I/O thread: a client whose put waits for room does not hold up
// another client's get (before, the get waited out the nvme write behind it), and the put is
// answered from a worker.
TEST(IoThreadWaits, AClientWaitingForRoomDoesNotHoldUpAnother) {
  Rig rig = MakeRig(16 * kMiB);
  Fragment(rig);
  StoreService service(ServiceConfig{}, rig.store.get());
  const std::string dir =
      std::filesystem::temp_directory_path() / ("tierpool-io-waits-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  transport::UnixServerConfig config;
  config.socket_path = dir + "/s";
  config.io_threads = 1;
  config.worker_threads = 2;
  transport::UnixServer server(config, &service);
  ASSERT_TRUE(server.Start().ok());
  auto a = transport::BlockingConnection::Connect(config.socket_path);
  auto b = transport::BlockingConnection::Connect(config.socket_path);
  ASSERT_TRUE(a.ok() && b.ok());

  wire::Request put;
  put.set_id(1);
  auto* item = put.mutable_reserve()->add_items();
  item->set_ns("ns");
  item->set_key("big");
  item->set_size(2 * kMiB);
  wire::Request get;
  get.set_id(2);
  get.mutable_get()->set_mode(wire::INLINE);
  auto* k = get.mutable_get()->add_keys();
  k->set_ns("ns");
  k->set_key(Key(2));

  const auto put_sent = Clock::now();
  ASSERT_TRUE((*a)->Send(put).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the put is being handled
  wire::Response got;
  const auto get_sent = Clock::now();
  ASSERT_TRUE((*b)->Call(get, &got).ok());
  const double get_ms = MsSince(get_sent);
  ASSERT_EQ(got.get().items_size(), 1);
  EXPECT_EQ(got.get().items(0).data(), Bytes(2, kMiB));
  EXPECT_LT(get_ms, kAtOnceMs) << "the get waited " << get_ms << " ms behind another client's put";

  wire::Response put_reply;
  ASSERT_TRUE((*a)->ReceiveReply(put, &put_reply).ok());
  EXPECT_GT(MsSince(put_sent), kAtOnceMs) << "the put did not wait for its room";
  ASSERT_EQ(put_reply.reserve().items_size(), 1);
  EXPECT_EQ(put_reply.reserve().items(0).status().code(),
            static_cast<int>(StatusCode::kResourceExhausted));
  EXPECT_EQ(server.stats().requests_moved_to_workers, 1u);
  server.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierpool
