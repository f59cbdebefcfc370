// The tierpool client: put tensors into the node's tierpoold and get them back.
//
//   auto client = tierpool::Client::Connect();            // default socket, namespace "default"
//   client.value()->Put("layer3.act", buf, bytes);        // copy in
//   auto view = client.value()->GetView("layer3.act");    // zero copy; released with the view
//
// One Client is safe to use from several threads: each call takes a connection from a small
// pool. Objects are named by key inside the client's namespace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tierpool/export.h"
#include "tierpool/status.h"
#include "tierpool/types.h"

namespace tierpool {

namespace detail {
class ClientCore;
struct PooledConnection;
// A named counter's value in a stat reply's list; 0 when absent.
inline std::uint64_t Find(const std::vector<std::pair<std::string, std::uint64_t>>& counters,
                          std::string_view name) {
  for (const auto& [n, v] : counters) {
    if (n == name) return v;
  }
  return 0;
}
}  // namespace detail

struct ClientOptions {
  std::string socket_path;     // empty: $TIERPOOL_SOCKET, $XDG_RUNTIME_DIR/tierpool.sock,
                               // else /tmp/tierpool-<uid>.sock
  std::string ns = "default";  // the namespace every key of this client lives in
  std::string client_name;     // shows in the server's logs
  int max_connections = 4;     // connections opened on demand for concurrent callers
  // Check each copying get's bytes (Get, GetBytes, GetBatch) against the object's XXH3 as they
  // are copied, in the same pass: a writer's stray write after its commit, or bad memory, is
  // DATA_LOSS, never wrong bytes with OK. Views are not checked as they are read (their
  // Verify() is). false: plain copies. (nvme and remote bytes are always checked by the server.)
  bool verify_checksums = true;
  int async_threads = 2;  // worker threads behind the *Async calls
  // Poll this long for a reply before sleeping: saves a thread wakeup (tens of microseconds on
  // VMs) per call at the price of a busy core meanwhile. 0: always sleep.
  unsigned busy_poll_us = 50;
  // Calls go through a shared-memory request ring beside each connection when the server offers
  // one (--max-request-rings): no syscall on either side while both poll, a few microseconds
  // less per call. Costs the server 132 KiB per connection. false: the socket only.
  bool request_ring = true;
  // One-round-trip puts: after two puts in a row of at most 4 MiB each, with the same placement,
  // through reservations (Put above the inline threshold, or Reserve), a connection asks the
  // server to stage room for the next one, as large as the largest of the last four; a next put
  // that fits copies into it and commits (the room past its bytes going back): one round trip
  // instead of reserve + commit. Costs at most one such extent (4 MiB) of server memory per open
  // connection, taken only from free room below the high watermark.
  bool stage_puts = true;
};

struct PutOptions {
  std::string dtype;                // e.g. "float16"; free-form, informational
  std::vector<std::int64_t> shape;  // informational
  ObjectKind kind = ObjectKind::kOther;
  Durability durability = Durability::kRetained;
  std::optional<TierKind> tier;  // kHbm to place it in hbm; default dram
  int numa_node = -1;            // preferred NUMA node for dram; -1: any
  // Reserve only, with tier = kHbm on a server whose hbm is a GPU's memory (--hbm-device): the
  // room is in device memory, and the caller writes it there (device_data(): a kernel's output,
  // cudaMemcpy) before Commit. Needs a client built with -DTIERPOOL_CUDA=ON on the server's
  // node. When the server cannot place it there (no room, another kind of hbm) the room is in
  // host memory (data()), as without it.
  bool device = false;
};

struct PutItem {
  std::string key;
  const void* data = nullptr;
  std::size_t size = 0;
  PutOptions options;
};

struct GetItem {
  std::string key;
  void* buffer = nullptr;
  std::size_t capacity = 0;
};

struct TierInfo {
  TierKind tier = TierKind::kDram;
  std::uint64_t capacity = 0;
  std::uint64_t used_bytes = 0;
  std::uint64_t object_count = 0;
  std::uint64_t free_extents = 0;
  std::uint64_t largest_free_extent = 0;
  double fragmentation = 0;
  double high_watermark = 0;
  double low_watermark = 0;
  bool pages_locked = false;
  std::string backend;
  std::uint64_t failed_allocations = 0;
  std::string state;  // ok, degraded (repeated I/O errors), full (the device said ENOSPC)
  std::uint64_t read_errors = 0;
  std::uint64_t write_errors = 0;
  std::uint64_t checksum_failures = 0;
  std::uint64_t peak_used_bytes = 0;  // the most ever in use at once since the server started
};

// A registered plan as the server's executor sees it.
struct JobInfo {
  std::uint64_t id = 0;
  std::string ns;
  std::string name;
  std::uint64_t hbm_budget_bytes = 0;
  std::uint64_t iteration = 0;
  std::uint32_t step = 0;
  std::uint64_t pending_prefetches = 0;
  // hits, late, late_wait_us, misses, bytes_in, bytes_out, actions_issued, dropped_clean,
  // actions_skipped (skipped_absent, skipped_in_place, skipped_dead: why), actions_cancelled,
  // waited_for_room, failed, budget_peak_bytes
  std::vector<std::pair<std::string, std::uint64_t>> counters;
  std::uint64_t counter(std::string_view name) const { return detail::Find(counters, name); }
};

// A move between tiers that the server finished (StatOptions::moves_since_us).
struct MoveEvent {
  TierKind from = TierKind::kDram;
  TierKind to = TierKind::kHbm;
  std::uint64_t bytes = 0;
  std::uint64_t started_us = 0;  // CLOCK_MONOTONIC microseconds (std::chrono::steady_clock)
  std::uint64_t finished_us = 0;
  bool ok = false;
};

struct StatOptions {
  bool reset_peaks = false;  // after answering, each tier's peak starts again from its use now
  // Also return the moves that finished at or after this time (steady_clock microseconds).
  std::optional<std::uint64_t> moves_since_us;
};

// A member of the server's cluster (`tierpool peers`).
struct ClusterMemberInfo {
  std::string node_id;
  std::uint64_t incarnation = 0;
  std::string peer_address;
  std::uint64_t lend_bytes = 0;  // what it lends in all
  // What it would still grant the server asked, as it last said (for that server: its free room).
  std::uint64_t lend_free = 0;
  std::uint64_t granted_to_us = 0;  // regions it granted the server asked
  std::uint64_t used_by_us = 0;     // of those, holding replicas
  bool responsive = true;
  std::uint64_t failures = 0;
  bool self = false;      // the server asked
  std::string transport;  // the server's data path to it: "tcp" or "ucx" (empty: not borrowed)
};

struct ServerStats {
  std::vector<MoveEvent> moves;
  std::vector<ClusterMemberInfo> members;  // empty when the server is in no cluster
  std::string server_version;
  std::uint64_t uptime_ms = 0;
  std::vector<TierInfo> tiers;
  std::vector<std::pair<std::string, std::uint64_t>> counters;
  std::vector<JobInfo> jobs;
  std::uint64_t counter(std::string_view name) const { return detail::Find(counters, name); }
};

// A pinned, read-only object the caller reads in place. The server will not move or free it
// until the view is released (on destruction, or Release()) or the connection closes, however
// long it is held.
class TIERPOOL_EXPORT ObjectView {
 public:
  ObjectView() = default;
  ObjectView(ObjectView&&) noexcept;
  ObjectView& operator=(ObjectView&&) noexcept;
  ~ObjectView();

  // The bytes in host memory; nullptr for a device view.
  const std::byte* data() const { return data_; }
  std::size_t size() const { return static_cast<std::size_t>(meta_.size); }
  const ObjectMeta& meta() const { return meta_; }
  // A device view (GetViewOptions::device, the copy in a GPU's memory): its device address and
  // CUDA device, for kernels and copies on that device. nullptr and -1 for host views.
  const void* device_data() const { return device_data_; }
  int device() const { return device_; }
  // Checks the bytes against the object's XXH3-64 checksum (a device view's on the GPU).
  Status Verify() const;
  void Release();

 private:
  friend class Client;
  std::shared_ptr<detail::PooledConnection> conn_;
  std::uint64_t lease_id_ = 0;
  const std::byte* data_ = nullptr;
  const void* device_data_ = nullptr;
  int device_ = -1;
  ObjectMeta meta_;
};

// Room for one object, reserved in shared memory: write the bytes at data(), then Commit().
// Destroying it uncommitted aborts the reservation.
class TIERPOOL_EXPORT WriteReservation {
 public:
  WriteReservation() = default;
  WriteReservation(WriteReservation&&) noexcept;
  WriteReservation& operator=(WriteReservation&&) noexcept;
  ~WriteReservation();

  // Where to write the bytes: host memory, or nullptr for a device reservation.
  std::byte* data() { return data_; }
  // A device reservation's device address and CUDA device (PutOptions::device); nullptr, -1.
  void* device_data() { return device_data_; }
  int device() const { return device_; }
  std::size_t size() const { return size_; }
  TierKind tier() const { return tier_; }
  // Checksums the bytes (a device reservation's on the GPU, from 241 bytes up) and
  // publishes the object under its key.
  Status Commit();
  Status Abort();

 private:
  friend class Client;
  Status CommitWith(std::uint64_t checksum);

  std::shared_ptr<detail::PooledConnection> conn_;
  std::uint64_t reservation_id_ = 0;
  std::byte* data_ = nullptr;
  void* device_data_ = nullptr;
  int device_ = -1;
  std::size_t size_ = 0;
  TierKind tier_ = TierKind::kDram;
  std::string key_;
  PutOptions options_;
  bool named_by_commit_ = false;  // room the connection had staged: the commit names it
};

struct GetViewOptions {
  // Pin this tier's copy (kHbm: the copy a step is about to use): the server waits for a
  // prefetch already bringing it there, or brings it up on demand. When no room can be made the
  // nearest copy is returned; meta().tier says which. For a copying get, the copy is made from
  // that tier's bytes (a planned step's read counts as its use of the hbm copy).
  std::optional<TierKind> tier;
  // With tier = kHbm on a server whose hbm is a GPU's memory (--hbm-device): a view of the copy
  // in device memory, read in place by the GPU (device_data()), instead of a host copy. Needs a
  // client built with -DTIERPOOL_CUDA=ON on the server's node; views only (copying gets ignore
  // it). When the object cannot be brought into hbm, the view is of a host copy (data()).
  bool device = false;
};
using GetOptions = GetViewOptions;

// What a job hands the server so that its executor moves tensors ahead of need
// (docs/schedules.md, "Live prefetch").
struct PlanRegistration {
  std::string name;               // shown in stat; default: the schedule's name
  std::string schedule;           // a serialized tierpool.schedule.Schedule (a .pb file's bytes)
  std::string plan;               // a serialized tierpool.schedule.Plan for it
  std::vector<std::string> keys;  // the object key of each tensor; empty: the tensors' names
  std::uint64_t hbm_budget_bytes = 0;  // 0: the plan's
  // The job's objects: those of the namespace whose keys start with it are deleted when the
  // plan goes (Unregister, the handle dropped, or the process gone). Empty: none.
  std::string owned_prefix;
};

// A registered plan. It holds a connection of its own: the plan lives while the handle does
// (or until Unregister), and the server drops it if the process dies.
class TIERPOOL_EXPORT PlanHandle {
 public:
  PlanHandle() = default;
  PlanHandle(PlanHandle&&) noexcept;
  PlanHandle& operator=(PlanHandle&&) noexcept;
  ~PlanHandle();

  std::uint64_t job_id() const { return job_id_; }
  // The job is about to start `step` of `iteration`. One-way (no reply): cheap enough to call
  // every step. Errors in it (a step out of range) are logged by the server.
  Status ReportProgress(std::uint64_t iteration, std::uint32_t step);
  // The same, saying the most memory the job held outside tierpool since its last report
  // (shown per job in stat).
  Status ReportProgress(std::uint64_t iteration, std::uint32_t step, std::uint64_t outside_bytes);
  Status Unregister();

 private:
  friend class Client;
  std::shared_ptr<detail::PooledConnection> conn_;
  std::uint64_t job_id_ = 0;
};

class TIERPOOL_EXPORT Client {
 public:
  static Result<std::unique_ptr<Client>> Connect(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& ns() const;
  // The CUDA device whose memory holds the server's hbm tier (tierpoold --hbm-device) when this
  // client can use it (built with -DTIERPOOL_CUDA=ON), else -1. Device views and reservations
  // (GetViewOptions::device, PutOptions::device) are in that device's memory.
  int hbm_device() const;

  // Copies size bytes from data. Replaces an object of the same key.
  Status Put(std::string_view key, const void* data, std::size_t size,
             const PutOptions& options = {});
  // Two-phase put: reserve, write in place, commit.
  Result<WriteReservation> Reserve(std::string_view key, std::size_t size,
                                   const PutOptions& options = {});
  // Copies the object into buffer; returns its size. INVALID_ARGUMENT when capacity is too small
  // (the message says how large the object is).
  Result<std::size_t> Get(std::string_view key, void* buffer, std::size_t capacity);
  Result<std::size_t> Get(std::string_view key, void* buffer, std::size_t capacity,
                          const GetOptions& options);
  Result<std::vector<std::byte>> GetBytes(std::string_view key);
  // Zero copy: pins the object where it is and maps it read-only.
  Result<ObjectView> GetView(std::string_view key);
  Result<ObjectView> GetView(std::string_view key, const GetViewOptions& options);
  // Views of several objects in one round trip.
  std::vector<Result<ObjectView>> GetViews(const std::vector<std::string>& keys,
                                           const GetViewOptions& options = {});
  // Metadata only.
  Result<ObjectMeta> Stat(std::string_view key);
  Status Delete(std::string_view key);
  Result<std::vector<ObjectMeta>> List(std::string_view prefix = "", std::uint32_t limit = 1000);
  // Moves an object to a tier (kHbm: ahead of use; kDram: out of the way).
  Status Promote(std::string_view key, TierKind target = TierKind::kHbm);
  Result<ServerStats> ServerStat(const StatOptions& options = {});

  // Registers a plan for this client's namespace (one per namespace at a time).
  Result<PlanHandle> RegisterPlan(const PlanRegistration& registration);

  // Batch forms: one round trip for the lot; one status per item.
  std::vector<Status> PutBatch(const std::vector<PutItem>& items);
  std::vector<Result<std::size_t>> GetBatch(const std::vector<GetItem>& items,
                                            const GetOptions& options = {});
  std::vector<Status> DeleteBatch(const std::vector<std::string>& keys);

  // Async forms: the buffers must stay valid until the future is ready.
  std::future<Status> PutAsync(std::string key, const void* data, std::size_t size,
                               PutOptions options = {});
  std::future<Result<std::size_t>> GetAsync(std::string key, void* buffer, std::size_t capacity);
  std::future<std::vector<Status>> PutBatchAsync(std::vector<PutItem> items);
  std::future<std::vector<Result<std::size_t>>> GetBatchAsync(std::vector<GetItem> items);

 private:
  explicit Client(std::shared_ptr<detail::ClientCore> core);
  std::shared_ptr<detail::ClientCore> core_;
};

}  // namespace tierpool
