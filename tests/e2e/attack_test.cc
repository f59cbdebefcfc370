// The attacks of the hardening issue, each automated against a real tierpoold: a client, careless
// or hostile, must not corrupt another's tensors, freeze the server or starve it.
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "common/tsan.h"
#include "tests/e2e/server_process.h"
#include "transport/blocking_connection.h"

namespace tierpool::testing {
namespace {

using Clock = std::chrono::steady_clock;
using transport::BlockingConnection;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Resident memory of a process, from /proc.
std::uint64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

int RawConnect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Forks a process that opens `count` connections, optionally sends each `bytes`, and then sits
// on them until killed. Returns its pid once its connections are open.
pid_t HogProcess(const std::string& socket, int count, const std::string& bytes = "") {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    for (int i = 0; i < count; ++i) {
      int fd = RawConnect(socket);
      if (fd >= 0 && !bytes.empty()) (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    }
    char c = 'r';
    (void)::write(ready[1], &c, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c;
  (void)::read(ready[0], &c, 1);
  ::close(ready[0]);
  return pid;
}

void Kill(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

// How long a fresh client's stat takes, or a large value when it fails.
double StatMs(const ServerProcess& server) {
  const auto t0 = Clock::now();
  auto client = server.Connect();
  if (!client.ok()) return 1e9;
  if (!(*client)->ServerStat().ok()) return 1e9;
  return Ms(Clock::now() - t0);
}

// A client that speaks the protocol by hand, to send what the library never would.
class RawClient {
 public:
  explicit RawClient(const ServerProcess& server) : ns_(server.options().ns) {
    auto c = BlockingConnection::Connect(server.socket());
    if (!c.ok()) return;
    conn_ = std::move(c).value();
    wire::Request hello;
    hello.mutable_hello()->set_protocol_version(transport::kProtocolVersion);
    wire::Response resp;
    std::vector<UniqueFd> fds;  // the arenas: not needed here
    if (!Call(hello, &resp, &fds).ok()) conn_.reset();
  }
  bool ok() const { return conn_ != nullptr; }
  BlockingConnection& conn() { return *conn_; }
  Status Call(wire::Request& req, wire::Response* resp, std::vector<UniqueFd>* fds = nullptr) {
    req.set_id(next_id_++);
    return conn_->Call(req, resp, fds);
  }
  // Reserves `size` bytes under `key` and commits them, unwritten, declaring `checksum`; returns
  // the commit's status.
  Result<wire::Status> ReserveAndCommit(const std::string& key, std::uint64_t size,
                                        std::uint64_t checksum) {
    wire::Request reserve;
    auto* spec = reserve.mutable_reserve()->add_items();
    spec->set_ns(ns_);
    spec->set_key(key);
    spec->set_size(size);
    wire::Response resp;
    TIERPOOL_RETURN_IF_ERROR(Call(reserve, &resp));
    if (resp.reserve().items(0).status().code() != 0) {
      return Status::Internal("reserve refused: " + resp.reserve().items(0).status().message());
    }
    wire::Request commit;
    auto* item = commit.mutable_commit()->add_items();
    item->set_reservation_id(resp.reserve().items(0).reservation_id());
    item->set_checksum(checksum);
    TIERPOOL_RETURN_IF_ERROR(Call(commit, &resp));
    return resp.statuses().items(0);
  }

 private:
  std::string ns_;
  std::unique_ptr<BlockingConnection> conn_;
  std::uint64_t next_id_ = 1;
};

// 1. A writer that writes through its reservation after its time limit must not land in another
// object's bytes: the memory stays its own until its connection closes. (Before the fix the
// reservation was freed, the victim's put took the memory, and its get returned the late
// writer's bytes with OK.)
TEST(Attack, LateWriterCannotOverwriteAnotherObject) {
  ServerProcess server({"--dram", "8M", "--hbm", "0", "--reservation-ttl-ms", "100"});
  ASSERT_TRUE(server.started());
  auto late = server.Connect();
  auto victim = server.Connect();
  ASSERT_TRUE(late.ok() && victim.ok());
  auto r = (*late)->Reserve("slow", 6 << 20);
  ASSERT_TRUE(r.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // well past the limit
  const std::string mine = Pattern(7, 6 << 20);
  const Status first = (*victim)->Put("mine", mine.data(), mine.size());
  std::memset(r->data(), 0xAA, r->size());  // the late write
  EXPECT_FALSE(r->Commit().ok());
  if (first.ok()) {
    auto back = (*victim)->GetBytes("mine");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(std::memcmp(back->data(), mine.data(), mine.size()), 0)
        << "the late writer's bytes came back with OK";
  }
  // The memory the late writer may still write is not given to anyone while it lives.
  EXPECT_EQ(first.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ((*late)->Put("more", "x", 1).code(), StatusCode::kFailedPrecondition);
  late->reset();  // the late writer goes; what it held is freed
  ASSERT_TRUE(
      server.WaitFor([](const ServerStats& s) { return s.counter("reservations_open") == 0; }));
  ASSERT_TRUE((*victim)->Put("mine", mine.data(), mine.size()).ok());
  auto back = (*victim)->GetBytes("mine");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::memcmp(back->data(), mine.data(), mine.size()), 0);
  auto s = (*victim)->ServerStat();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->counter("clients_overdue"), 1u);
}

// A writer that keeps writing through its reservation's pointer after Commit (a use-after-commit
// bug, or bad memory) changes the committed object in place: shared memory cannot stop it.
// Every copying get of another client says DATA_LOSS, never the changed bytes with OK; a view
// hands its bytes out unchecked, and its Verify says so. (Before, Get, GetBytes and GetBatch
// returned the changed bytes with OK unless the client had turned verify_checksums on.)
TEST(Attack, AWriteAfterItsCommitIsDataLossForEveryCopyingGet) {
  ServerProcess server({"--dram", "64M", "--hbm", "16M"});
  ASSERT_TRUE(server.started());
  auto writer = server.Connect();
  auto reader = server.Connect();
  ASSERT_TRUE(writer.ok() && reader.ok());
  for (std::size_t size : {std::size_t{4096}, std::size_t{1} << 20}) {
    for (TierKind tier : {TierKind::kDram, TierKind::kHbm}) {
      const std::string key = "obj-" + std::to_string(size) + "-" + std::string(TierName(tier));
      const std::string data = Pattern(11, size);
      PutOptions o;
      o.tier = tier;
      auto r = (*writer)->Reserve(key, size, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      std::memcpy(r->data(), data.data(), size);
      std::byte* stray = r->data();
      ASSERT_TRUE(r->Commit().ok());
      stray[size / 2] ^= std::byte{0x5a};  // the write after its commit
      EXPECT_EQ((*reader)->GetBytes(key).status().code(), StatusCode::kDataLoss) << key;
      std::string buf(size, '\0');
      EXPECT_EQ((*reader)->Get(key, buf.data(), size).status().code(), StatusCode::kDataLoss)
          << key;
      auto batch = (*reader)->GetBatch({GetItem{key, buf.data(), size}});
      EXPECT_EQ(batch[0].status().code(), StatusCode::kDataLoss) << key;
      // A view: refused where the server's own copy (a small object's bytes sent in the reply)
      // found the damage and quarantined the object; else unchecked, and its Verify says so.
      auto view = (*reader)->GetView(key);
      const StatusCode got = view.ok() ? view->Verify().code() : view.status().code();
      EXPECT_EQ(got, StatusCode::kDataLoss) << key;
    }
  }
  // Plain copies, asked for, are the caller's risk.
  ClientOptions plain;
  plain.socket_path = server.socket();
  plain.verify_checksums = false;
  plain.ns = (*writer)->ns();
  auto unchecked = Client::Connect(plain);
  ASSERT_TRUE(unchecked.ok());
  std::string buf(1 << 20, '\0');
  auto plain_get = (*unchecked)->Get("obj-1048576-dram", buf.data(), buf.size());
  EXPECT_TRUE(plain_get.ok()) << plain_get.status().ToString();
}

// 1. A view read after its time limit still shows its own object's bytes: the pinned memory is
// not reused while the reader's connection lives, even when the object is deleted. (Before the
// fix the view showed the next object's bytes.)
TEST(Attack, LateReaderStillSeesItsOwnBytes) {
  ServerProcess server({"--dram", "8M", "--hbm", "0", "--lease-ttl-ms", "100"});
  ASSERT_TRUE(server.started());
  auto reader = server.Connect();
  auto other = server.Connect();
  ASSERT_TRUE(reader.ok() && other.ok());
  const std::string weights = Pattern(1, 6 << 20);
  ASSERT_TRUE((*other)->Put("weights", weights.data(), weights.size()).ok());
  auto view = (*reader)->GetView("weights");
  ASSERT_TRUE(view.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // well past the limit
  ASSERT_TRUE((*other)->Delete("weights").ok());
  const std::string next = Pattern(2, 6 << 20);
  const Status put = (*other)->Put("next", next.data(), next.size());
  EXPECT_EQ(std::memcmp(view->data(), weights.data(), weights.size()), 0)
      << "the view shows another object's bytes";
  EXPECT_TRUE(view->Verify().ok());
  EXPECT_FALSE(put.ok());  // the only room is the pinned memory
  *view = ObjectView();
  reader->reset();
  ASSERT_TRUE(server.WaitFor([](const ServerStats& s) { return s.counter("leases_open") == 0; }));
  EXPECT_TRUE((*other)->Put("next", next.data(), next.size()).ok());
}

// 1. With the defaults there is no time limit: a view held for a long time stays valid.
TEST(Attack, ViewsAndReservationsHaveNoTimeLimitByDefault) {
  ServerProcess server({"--dram", "8M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  const std::string b = Pattern(3, 1 << 20);
  ASSERT_TRUE((*client)->Put("w", b.data(), b.size()).ok());
  auto view = (*client)->GetView("w");
  auto r = (*client)->Reserve("r", 4096);
  ASSERT_TRUE(view.ok() && r.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::memset(r->data(), 1, r->size());
  EXPECT_TRUE(r->Commit().ok());
  EXPECT_TRUE(view->Verify().ok());
  auto s = (*client)->ServerStat();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->counter("clients_overdue"), 0u);
}

// 2. Frame headers that declare 16 MiB and send nothing more cost the server a small buffer each,
// not the declared length, and other clients are served meanwhile.
TEST(Attack, HeadersAloneDoNotMakeTheServerAllocate) {
  ServerProcess server({"--dram", "16M", "--hbm", "0", "--max-connections-per-process", "0"});
  ASSERT_TRUE(server.started());
  ASSERT_LT(StatMs(server), 5000.0);
  const std::uint64_t before = RssBytes(server.pid());
  std::uint8_t header[transport::kFrameHeaderSize];
  transport::EncodeFrameHeader(16u << 20, header);
  constexpr int kConnections = 300;
  pid_t hog = HogProcess(server.socket(), kConnections,
                         std::string(reinterpret_cast<char*>(header), sizeof(header)));
  ASSERT_TRUE(server.WaitFor(
      [](const ServerStats& s) { return s.counter("connections_active") >= kConnections; }));
  const std::uint64_t after = RssBytes(server.pid());
  const double stat_ms = StatMs(server);
  auto stats = server.Connect();
  ASSERT_TRUE(stats.ok());
  auto s = (*stats)->ServerStat();
  Kill(hog);
  ASSERT_TRUE(s.ok());
  // At most one first chunk (64 KiB) per connection, against 16 MiB each before (4.8 GB).
  // (plus the stat request's own frame)
  EXPECT_LE(s->counter("frame_bytes_buffered"), (kConnections + 1) * (64u << 10));
#ifndef TIERPOOL_TSAN  // ThreadSanitizer's shadow memory multiplies what the buffers touch
  EXPECT_LT(after, before + (64u << 20)) << "server grew from " << before << " to " << after;
#else
  (void)before;
  (void)after;
#endif
  EXPECT_LT(stat_ms, 2000.0);
  EXPECT_TRUE(server.WaitFor([](const ServerStats& st) {
    return st.counter("frame_bytes_buffered") <= (64u << 10) &&
           st.counter("connections_active") <= 2;
  }));
}

// 3. Puts that fail for want of room cost little, however many objects the tier holds, and do not
// hold up another client's requests.
TEST(Attack, FailingPutsOnAFullTierDoNotFreezeOthers) {
  ServerProcess server({"--dram", "200M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto filler = server.Connect();
  ASSERT_TRUE(filler.ok());
  // Fill dram with one-byte objects (one 4 KiB extent each) until a put fails.
  int stored = 0;
  for (int batch = 0; batch < 20; ++batch) {
    std::vector<PutItem> items;
    std::vector<std::string> keys;
    for (int i = 0; i < 4096; ++i) keys.push_back("o" + std::to_string(batch * 4096 + i));
    for (const auto& k : keys) items.push_back({k, "x", 1, {}});
    bool full = false;
    for (const auto& st : (*filler)->PutBatch(items)) {
      if (st.ok()) {
        ++stored;
      } else {
        full = true;
      }
    }
    if (full) break;
  }
  ASSERT_GT(stored, 40000);
  std::atomic<bool> done{false};
  double worst_stat_ms = 0;
  std::thread watcher([&] {
    auto c = server.Connect();
    while (!done.load() && c.ok()) {
      const auto t0 = Clock::now();
      if (!(*c)->ServerStat().ok()) break;
      worst_stat_ms = std::max(worst_stat_ms, Ms(Clock::now() - t0));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const auto t0 = Clock::now();
  int failed = 0;
  for (int i = 0; i < 1024; ++i) {
    if (!(*filler)->Put("more" + std::to_string(i), "y", 1).ok()) ++failed;
  }
  const double fail_ms = Ms(Clock::now() - t0);
  done = true;
  watcher.join();
  EXPECT_GT(failed, 1000);
  // Before the fix: 4 ms per failed put with 200k objects, and other clients waited seconds.
  EXPECT_LT(fail_ms, 3000.0) << stored << " objects";
  EXPECT_LT(worst_stat_ms, 1000.0);
}

// 4. Objects committed with a wrong checksum are quarantined when the spill meets them, and the
// spill goes on for everyone else.
TEST(Attack, CorruptCommitsDoNotStopTheSpill) {
  ServerProcess server(
      {"--dram", "8M", "--hbm", "0", "--nvme-backend", "memory", "--nvme-bytes", "128M"});
  ASSERT_TRUE(server.started());
  RawClient raw(server);
  ASSERT_TRUE(raw.ok());
  for (int i = 0; i < 8; ++i) {
    auto committed = raw.ReserveAndCommit("bad" + std::to_string(i), 256 << 10,
                                          12345);  // not the bytes' checksum
    ASSERT_TRUE(committed.ok()) << committed.status().ToString();
    ASSERT_EQ(committed->code(), 0u) << committed->message();
  }
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  const std::string b = Pattern(4, 256 << 10);
  int accepted = 0;
  for (int i = 0; i < 200; ++i) {
    if ((*client)->Put("good" + std::to_string(i), b.data(), b.size()).ok()) ++accepted;
  }
  EXPECT_EQ(accepted, 200);  // 31 of 200 before the fix
  auto s = (*client)->ServerStat();
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->counter("quarantined"), 1u);
  EXPECT_EQ((*client)->GetBytes("bad0").status().code(), StatusCode::kDataLoss);
  auto good = (*client)->GetBytes("good0");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(std::memcmp(good->data(), b.data(), b.size()), 0);
}

// 4. With --verify-commits the server checks a commit's bytes: a wrong checksum is refused at
// once instead of being found at the spill.
TEST(Attack, VerifiedCommitsRefuseAWrongChecksum) {
  ServerProcess server({"--dram", "8M", "--hbm", "0", "--verify-commits", "true"});
  ASSERT_TRUE(server.started());
  RawClient raw(server);
  ASSERT_TRUE(raw.ok());
  // Large: verified on a worker thread.
  auto committed = raw.ReserveAndCommit("bad", 2 << 20, 12345);
  ASSERT_TRUE(committed.ok()) << committed.status().ToString();
  EXPECT_EQ(committed->code(), static_cast<std::uint32_t>(StatusCode::kDataLoss));
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Stat("bad").status().code(), StatusCode::kNotFound);
  const std::string b = Pattern(6, 2 << 20);
  EXPECT_TRUE((*client)->Put("good", b.data(), b.size()).ok());  // the copy path still commits
  auto s = (*client)->ServerStat();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->counter("commits_rejected"), 1u);
}

// 5. Connections that say nothing are closed after the handshake timeout, and one process cannot
// take every connection.
TEST(Attack, IdleConnectionsDoNotLockOthersOut) {
  ServerProcess server({"--dram", "8M", "--hbm", "0", "--max-connections", "64",
                        "--max-connections-per-process", "0", "--handshake-timeout-ms", "300"});
  ASSERT_TRUE(server.started());
  pid_t hog = HogProcess(server.socket(), 64);
  // All 64 slots are taken until the handshake timeout closes the silent connections.
  bool served = false;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!served && Clock::now() < deadline) {
    served = StatMs(server) < 1e9;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Kill(hog);
  EXPECT_TRUE(served);
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  auto s = (*client)->ServerStat();
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->counter("handshake_timeouts"), 1u);
}

TEST(Attack, OneProcessCannotTakeEveryConnection) {
  ServerProcess server({"--dram", "8M", "--hbm", "0", "--max-connections", "64",
                        "--max-connections-per-process", "16"});
  ASSERT_TRUE(server.started());
  pid_t hog = HogProcess(server.socket(), 64);
  const double stat_ms = StatMs(server);
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  auto s = (*client)->ServerStat();
  Kill(hog);
  EXPECT_LT(stat_ms, 1e9) << "a second process was locked out";
  ASSERT_TRUE(s.ok());
  EXPECT_GE(s->counter("connections_refused_per_process"), 48u);
}

// A frame trickled in (a header, then a few bytes, then nothing) is cut at the frame timeout,
// even on a connection whose idle timeout is long.
TEST(Attack, TrickledFrameIsCutAtTheFrameTimeout) {
  ServerProcess server(
      {"--dram", "8M", "--hbm", "0", "--frame-timeout-ms", "200", "--idle-timeout-ms", "60000"});
  ASSERT_TRUE(server.started());
  RawClient raw(server);
  ASSERT_TRUE(raw.ok());
  std::uint8_t header[transport::kFrameHeaderSize];
  transport::EncodeFrameHeader(100, header);
  ASSERT_TRUE(raw.conn().SendRaw(header, sizeof(header)).ok());
  ASSERT_TRUE(raw.conn().SendRaw("0123456789", 10).ok());
  const auto t0 = Clock::now();
  wire::Response resp;
  EXPECT_EQ(raw.conn().Receive(&resp).code(), StatusCode::kUnavailable);  // closed by the server
  EXPECT_LT(Ms(Clock::now() - t0), 30000.0);
  EXPECT_TRUE(
      server.WaitFor([](const ServerStats& s) { return s.counter("frame_timeouts") == 1; }));
}

// The client library replaces a pooled connection the server closed for idling: a client that
// waits longer than the idle timeout before its next call does not see an error.
TEST(Attack, ClientCarriesOnAfterTheServerClosedItsIdleConnection) {
  ServerProcess server({"--dram", "8M", "--hbm", "0", "--idle-timeout-ms", "200"});
  ASSERT_TRUE(server.started());
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Put("before", "x", 1).ok());
  ASSERT_TRUE(server.WaitFor([](const ServerStats& s) { return s.counter("idle_timeouts") >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE((*client)->Put("after", "y", 1).ok());
  EXPECT_TRUE((*client)->Stat("before").ok());
}

TEST(Attack, IdleConnectionHoldingNothingIsClosedOneHoldingAViewIsNot) {
  ServerProcess server({"--dram", "8M", "--hbm", "0", "--idle-timeout-ms", "200"});
  ASSERT_TRUE(server.started());
  auto idle = server.Connect();
  auto holder = server.Connect();
  ASSERT_TRUE(idle.ok() && holder.ok());
  ASSERT_TRUE((*holder)->Put("k", "abc", 3).ok());
  auto view = (*holder)->GetView("k");
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(server.WaitFor([](const ServerStats& s) { return s.counter("idle_timeouts") >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_TRUE(view->Verify().ok());
  EXPECT_TRUE((*holder)->Stat("k").ok()) << "the connection holding a view was closed";
}

// 6. Per-connection limits on reservations and pins, and what a connection held is returned when
// it closes.
TEST(Attack, PerClientLimitsOnReservationsAndPins) {
  ServerProcess server({"--dram", "64M", "--hbm", "0", "--max-reservations-per-client", "100",
                        "--max-pins-per-client", "50"});
  ASSERT_TRUE(server.started());
  auto hog = server.Connect();
  auto other = server.Connect();
  ASSERT_TRUE(hog.ok() && other.ok());
  std::vector<WriteReservation> held;
  for (int i = 0; i < 100; ++i) {
    auto r = (*hog)->Reserve("r" + std::to_string(i), 4096);
    ASSERT_TRUE(r.ok()) << i;
    held.push_back(std::move(r).value());
  }
  EXPECT_EQ((*hog)->Reserve("one-more", 4096).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE((*other)->Put("k", Pattern(5, 128 << 10).data(), 128 << 10).ok());
  std::vector<ObjectView> views;
  for (int i = 0; i < 50; ++i) {
    auto v = (*hog)->GetView("k");
    ASSERT_TRUE(v.ok()) << i;
    views.push_back(std::move(v).value());
  }
  EXPECT_EQ((*hog)->GetView("k").status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE((*other)->GetView("k").ok());
  // A connection's bytes in open reservations are bounded too: beyond its first, half of the
  // put tiers.
  auto first = (*other)->Reserve("first", 1 << 20);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*other)->Reserve("huge", 32 << 20).status().code(), StatusCode::kResourceExhausted);
  auto s = (*other)->ServerStat();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->counter("client_limit_refusals"), 3u);
  EXPECT_TRUE(first->Abort().ok());
  held.clear();
  views.clear();
  hog->reset();
  EXPECT_TRUE(server.WaitFor([](const ServerStats& st) {
    return st.counter("reservations_open") == 0 && st.counter("leases_open") == 0;
  }));
}

// #76 item 6: three connections of one process, each within its own share, held every byte of
// dram in uncommitted reservations, and every other client's put failed for as long as they
// stayed open. The connections of one process (and of one user) now share one share.
TEST(Attack, ConnectionsOfOneProcessShareOneShareOfReservations) {
  ServerProcess server({"--dram", "64M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  std::vector<std::unique_ptr<Client>> hogs;
  std::vector<WriteReservation> held;
  int refused = 0;
  for (int i = 0; i < 3; ++i) {
    auto c = server.Connect();
    ASSERT_TRUE(c.ok());
    auto r = (*c)->Reserve("hoard-" + std::to_string(i), 24 << 20);  // each its first: any size
    if (r.ok()) {
      held.push_back(std::move(r).value());
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
      EXPECT_NE(r.status().message().find("--max-reserved-fraction-per-process"), std::string::npos)
          << r.status().ToString();
      ++refused;
    }
    hogs.push_back(std::move(c).value());
  }
  EXPECT_EQ(held.size(), 1u);  // 24 MiB of a 32 MiB share; a second 24 MiB would pass it
  EXPECT_EQ(refused, 2);
  // Another process still puts: the CLI, 24 MiB from a file.
  const std::string file = "/tmp/tierpool-share-" + std::to_string(::getpid());
  {
    std::ofstream out(file, std::ios::binary);
    out << Pattern(3, 24 << 20);
  }
  int rc = -1;
  const std::string said = RunShell(std::string(TIERPOOL_CLI_PATH) + " --socket " +
                                        server.socket() + " put other-process " + file,
                                    &rc);
  std::remove(file.c_str());
  EXPECT_EQ(rc, 0) << said;
}

// Staged room (one-round-trip puts) is bounded per connection in count and size, and cannot be
// named into another namespace or for more bytes than it was staged for.
TEST(Attack, StagedRoomIsBoundedAndNamedOnlyAsStaged) {
  ServerProcess server({"--dram", "256M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  auto raw = BlockingConnection::Connect(server.socket());
  ASSERT_TRUE(raw.ok());
  std::uint64_t id = 1;
  auto call = [&](wire::Request& req) {
    req.set_id(id++);
    wire::Response resp;
    std::vector<UniqueFd> fds;
    EXPECT_TRUE((*raw)->Call(req, &resp, &fds).ok());
    return resp;
  };
  wire::Request hello;
  hello.mutable_hello()->set_protocol_version(transport::kProtocolVersion);
  hello.mutable_hello()->set_ns(server.options().ns);
  call(hello);
  wire::Request stage;
  for (int i = 0; i < 10; ++i) {
    auto* spec = stage.mutable_commit()->add_stage();
    spec->set_ns(server.options().ns);
    spec->set_size(1 << 20);
  }
  auto* huge = stage.mutable_commit()->add_stage();
  huge->set_ns(server.options().ns);
  huge->set_size(64 << 20);
  wire::Response staged = call(stage);
  ASSERT_EQ(staged.staged().items_size(), 11);
  int made = 0;
  for (const auto& item : staged.staged().items()) made += item.status().code() == 0;
  EXPECT_EQ(made, 4);
  EXPECT_EQ(staged.staged().items(10).status().code(),
            static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
  // Named into another namespace or size: refused, and the room is freed.
  wire::Request name;
  auto* a = name.mutable_commit()->add_items();
  a->set_reservation_id(staged.staged().items(0).reservation_id());
  a->mutable_spec()->set_ns("someone-else");
  a->mutable_spec()->set_key("k");
  a->mutable_spec()->set_size(1 << 20);
  auto* b = name.mutable_commit()->add_items();
  b->set_reservation_id(staged.staged().items(1).reservation_id());
  b->mutable_spec()->set_ns(server.options().ns);
  b->mutable_spec()->set_key("k");
  b->mutable_spec()->set_size((1 << 20) + 1);
  wire::Response named = call(name);
  ASSERT_EQ(named.statuses().items_size(), 2);
  for (const auto& st : named.statuses().items()) {
    EXPECT_EQ(st.code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument)) << st.message();
  }
  auto client = server.Connect();
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Stat("k").status().code(), StatusCode::kNotFound);
  auto stats = (*client)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counter("reservations_open"), 2u);  // the two staged rooms left
  raw->reset();
  EXPECT_TRUE(
      server.WaitFor([](const ServerStats& st) { return st.counter("reservations_open") == 0; }));
}

// Runs `body` in a child process as uid and gid 65534 (with `groups` as its supplementary groups
// when not empty) and returns the child's exit status: the failure bits `body` returned, 100 when
// becoming that user failed, -1 when the child did not exit.
int RunAsNobody(const std::vector<gid_t>& groups, const std::function<int()>& body) {
  pid_t child = ::fork();
  if (child == 0) {
    if ((!groups.empty() && ::setgroups(groups.size(), groups.data()) != 0) ||
        ::setgid(65534) != 0 || ::setuid(65534) != 0) {
      _exit(100);
    }
    _exit(body());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// 7. Namespaces are decided by the server from the peer's credentials, not claimed: another
// user that says ns=bob can neither read, overwrite nor delete bob's objects. Needs root (to
// become another user); skipped otherwise.
TEST(Attack, NamespacesAreTheServersDecisionNotTheClientsClaim) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  const std::string policy = "/tmp/tierpool-policy-" + std::to_string(::getpid()) + ".json";
  std::ofstream(policy) << R"({"grants": [{"uid": 65534, "namespaces": ["alice-*"]}],
                               "quotas": {"alice-1": {"objects": 1}}})";
  ServerProcess server(
      {"--dram", "8M", "--hbm", "0", "--socket-mode", "0666", "--namespace-policy", policy});
  ASSERT_TRUE(server.started());
  ClientOptions bob_opts = server.options();
  bob_opts.ns = "bob";
  auto bob = Client::Connect(bob_opts);
  ASSERT_TRUE(bob.ok());
  const std::string secret = Pattern(9, 4096);
  ASSERT_TRUE((*bob)->Put("secret", secret.data(), secret.size()).ok());
  const int failures = RunAsNobody({}, [&] {
    int bits = 0;
    ClientOptions o = bob_opts;  // claims ns=bob
    auto c = Client::Connect(o);
    if (!c.ok()) _exit(101);
    char buf[4096];
    if ((*c)->Get("secret", buf, sizeof(buf)).status().code() != StatusCode::kPermissionDenied) {
      bits |= 1;
    }
    if ((*c)->Put("secret", "evil", 4).code() != StatusCode::kPermissionDenied) bits |= 2;
    if ((*c)->Delete("secret").code() != StatusCode::kPermissionDenied) bits |= 4;
    o.ns = "alice-1";
    auto a = Client::Connect(o);
    if (!a.ok() || !(*a)->Put("mine", "ok", 2).ok()) bits |= 8;
    if (a.ok() && (*a)->Put("second", "no", 2).code() != StatusCode::kResourceExhausted) {
      bits |= 16;  // the namespace's object quota
    }
    return bits;
  });
  ::unlink(policy.c_str());
  EXPECT_EQ(failures, 0) << "failure bits: " << failures;
  auto back = (*bob)->GetBytes("secret");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(std::memcmp(back->data(), secret.data(), secret.size()), 0);
  auto stats = (*bob)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counter("ns_alice-1_objects"), 1u);
  EXPECT_EQ(stats->counter("quota_refusals"), 1u);
}

// A gid grant covers the peer's supplementary groups too, not just its primary group (it used
// to: a member of the group whose primary group is its own was refused). Needs root.
TEST(Attack, GroupGrantsCoverSupplementaryGroups) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  const std::string policy = "/tmp/tierpool-groups-" + std::to_string(::getpid()) + ".json";
  std::ofstream(policy) << R"({"grants": [{"gid": 4242, "namespaces": ["team-*"]}]})";
  ServerProcess server(
      {"--dram", "8M", "--hbm", "0", "--socket-mode", "0666", "--namespace-policy", policy});
  ASSERT_TRUE(server.started());
  const int failures = RunAsNobody({4242}, [&] {
    int bits = 0;
    ClientOptions o = server.options();
    o.ns = "team-a";
    auto c = Client::Connect(o);
    if (!c.ok() || !(*c)->Put("k", "ok", 2).ok()) bits |= 1;
    o.ns = "other";
    auto d = Client::Connect(o);
    if (!d.ok() || (*d)->Put("k", "no", 2).code() != StatusCode::kPermissionDenied) bits |= 2;
    return bits;
  });
  ::unlink(policy.c_str());
  EXPECT_EQ(failures, 0) << "failure bits: " << failures;
}

// The permissions of the mapping that holds p in this process ("r--p", "rw-s", ...).
std::string MappingPermissions(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  while (std::getline(maps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= at && at < hi) {
      return perms;
    }
  }
  return "";
}

// A raw handshake as `ns`: the reply and the descriptors that came with it.
Status RawHello(const std::string& socket, const std::string& ns, wire::Response* resp,
                std::vector<UniqueFd>* fds) {
  auto conn = transport::BlockingConnection::Connect(socket);
  if (!conn.ok()) return conn.status();
  wire::Request hello;
  hello.set_id(1);
  hello.mutable_hello()->set_protocol_version(transport::kProtocolVersion);
  hello.mutable_hello()->set_ns(ns);
  return (*conn)->Call(hello, resp, fds);
}

// 7, in the data plane. Another user with a namespace pool is sent only its pool's arenas:
// mapping and scanning everything it was given finds none of another namespace's bytes, and it
// cannot write through the descriptors views come from. Needs root; skipped otherwise.
TEST(Attack, AClientMapsOnlyItsOwnNamespacesMemoryAndViewsAreReadOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  const std::string policy = "/tmp/tierpool-pools-" + std::to_string(::getpid()) + ".json";
  std::ofstream(policy) << R"({"grants": [{"uid": 65534, "namespaces": ["bob", "bob-*"]}],
      "pools": {"bob": {"namespaces": ["bob", "bob-*"], "dram": "4M"}}})";
  ServerProcess server(
      {"--dram", "16M", "--hbm", "0", "--socket-mode", "0666", "--namespace-policy", policy});
  ASSERT_TRUE(server.started());
  ClientOptions alice_opts = server.options();
  alice_opts.ns = "alice";
  auto alice = Client::Connect(alice_opts);
  ASSERT_TRUE(alice.ok());
  const std::string secret = Pattern(11, 1 << 20);  // zero-copy: in a shared arena
  ASSERT_TRUE((*alice)->Put("secret", secret.data(), secret.size()).ok());
  const int failures = RunAsNobody({}, [&] {
    int bits = 0;
    wire::Response resp;
    std::vector<UniqueFd> fds;
    if (!RawHello(server.socket(), "bob-1", &resp, &fds).ok()) _exit(101);
    const auto& arenas = resp.hello().arenas();
    if (arenas.empty() || fds.size() != 2u * static_cast<std::size_t>(arenas.size())) bits |= 1;
    for (const auto& a : arenas) {
      if (a.pool() != 1) bits |= 1;
    }
    if (resp.hello().copy_only()) bits |= 2;
    // The attack: map every descriptor it was given and look for alice's bytes.
    for (const auto& fd : fds) {
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0 || st.st_size <= 0) continue;
      const auto size = static_cast<std::size_t>(st.st_size);
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (p == MAP_FAILED) continue;
      if (::memmem(p, size, secret.data(), 4096) != nullptr) bits |= 4;
      ::munmap(p, size);
    }
    for (const auto& a : arenas) {
      if (!a.has_read_only_fd_index() || a.read_only_fd_index() < 0) {
        bits |= 8;
        continue;
      }
      const int ro = fds[static_cast<std::size_t>(a.read_only_fd_index())].get();
      void* w = ::mmap(nullptr, a.size(), PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
      if (w != MAP_FAILED || errno != EACCES) bits |= 8;
      if (w != MAP_FAILED) ::munmap(w, a.size());
    }
    // Its own namespace works zero-copy, and a view is a read-only mapping.
    ClientOptions o = alice_opts;
    o.ns = "bob-1";
    auto bob = Client::Connect(o);
    if (!bob.ok()) _exit(102);
    const std::string mine = Pattern(12, 1 << 20);
    if (!(*bob)->Put("w", mine.data(), mine.size()).ok()) bits |= 16;
    auto view = (*bob)->GetView("w");
    if (!view.ok() || std::memcmp(view->data(), mine.data(), mine.size()) != 0) {
      bits |= 32;
    } else if (MappingPermissions(view->data()).rfind("r--", 0) != 0) {
      bits |= 64;
    }
    return bits;
  });
  ::unlink(policy.c_str());
  EXPECT_EQ(failures, 0) << "failure bits: " << failures;
  auto back = (*alice)->GetBytes("secret");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(std::memcmp(back->data(), secret.data(), secret.size()) == 0);
  auto stats = (*alice)->ServerStat();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->counter("pool_bob_dram_capacity"), 4u << 20);
  EXPECT_GE(stats->counter("pool_bob_dram_used_bytes"), 1u << 20);  // bob's object went there
  // The server's own user maps every pool, and its views are read-only too.
  auto view = (*alice)->GetView("secret");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(MappingPermissions(view->data()).rfind("r--", 0), 0u)
      << MappingPermissions(view->data());
}

// A user that may use a namespace but maps no memory of it (no pool covers its grant) still
// works: every byte through frames, checked; views and reservations are refused, not faked.
TEST(Attack, AClientWithoutAPoolGetsItsBytesThroughTheServer) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  const std::string policy = "/tmp/tierpool-copyonly-" + std::to_string(::getpid()) + ".json";
  std::ofstream(policy) << R"({"grants": [{"uid": 65534, "namespaces": ["carol"]}]})";
  ServerProcess server(
      {"--dram", "16M", "--hbm", "0", "--socket-mode", "0666", "--namespace-policy", policy});
  ASSERT_TRUE(server.started());
  const int failures = RunAsNobody({}, [&] {
    int bits = 0;
    wire::Response resp;
    std::vector<UniqueFd> fds;
    if (!RawHello(server.socket(), "carol", &resp, &fds).ok()) _exit(101);
    if (!resp.hello().copy_only() || resp.hello().arenas_size() != 0 || !fds.empty()) bits |= 1;
    ClientOptions o = server.options();
    o.ns = "carol";
    auto c = Client::Connect(o);
    if (!c.ok()) _exit(102);
    const std::string data = Pattern(13, 1 << 20);
    if (!(*c)->Put("k", data.data(), data.size()).ok()) bits |= 2;
    std::string out(data.size(), '\0');
    auto got = (*c)->Get("k", out.data(), out.size());
    if (!got.ok() || *got != data.size() || out != data) bits |= 4;
    if ((*c)->GetView("k").status().code() != StatusCode::kPermissionDenied) bits |= 8;
    if ((*c)->Reserve("r", 1 << 20).status().code() != StatusCode::kPermissionDenied) bits |= 16;
    auto bytes = (*c)->GetBytes("k");
    if (!bytes.ok() || std::memcmp(bytes->data(), data.data(), data.size()) != 0) bits |= 32;
    std::vector<PutItem> items;
    for (int i = 0; i < 3; ++i) items.push_back({"b" + std::to_string(i), data.data(), 100000, {}});
    for (const Status& s : (*c)->PutBatch(items)) {
      if (!s.ok()) bits |= 64;
    }
    return bits;
  });
  ::unlink(policy.c_str());
  EXPECT_EQ(failures, 0) << "failure bits: " << failures;
}

// 8. A client that sends requests and never reads the replies stalls only itself.
TEST(Attack, ClientThatNeverReadsItsRepliesStallsOnlyItself) {
  ServerProcess server({"--dram", "8M", "--hbm", "0"});
  ASSERT_TRUE(server.started());
  int fd = RawConnect(server.socket());
  ASSERT_GE(fd, 0);
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  // Hundreds of pipelined Hellos: each reply carries descriptors and fills the socket.
  std::string frames;
  for (int i = 0; i < 500; ++i) {
    wire::Request hello;
    hello.set_id(static_cast<std::uint64_t>(i + 1));
    hello.mutable_hello()->set_protocol_version(transport::kProtocolVersion);
    frames += transport::EncodeFrame(hello, transport::kDefaultMaxFrameBytes).value();
  }
  (void)::send(fd, frames.data(), frames.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double worst = 0;
  for (int i = 0; i < 5; ++i) worst = std::max(worst, StatMs(server));
  ::close(fd);
  EXPECT_LT(worst, 1000.0) << "another client waited on the one that does not read";
}

}  // namespace
}  // namespace tierpool::testing
