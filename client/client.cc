#include "tierpool/client.h"

#include <pthread.h>

#include <atomic>
#include <cstring>

#include "client/client_core.h"
#include "common/checksum.h"
#include "transport/wire_meta.h"

namespace tierpool {

namespace detail {

namespace {
std::atomic<std::uint64_t> fork_generation{0};
void CountFork() { fork_generation.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

std::uint64_t ForkGeneration() {
  static const int registered = ::pthread_atfork(nullptr, nullptr, &CountFork);
  (void)registered;
  return fork_generation.load(std::memory_order_relaxed);
}

Status ForkedStatus(int parent_pid) {
  return Status::FailedPrecondition(
      "this tierpool client was connected by process " + std::to_string(parent_pid) +
      " and this process is a fork() of it: connect a new client here (a forked child never "
      "uses its parent's connections)");
}

void FillSpec(const std::string& ns, std::string_view key, std::size_t size, const PutOptions& o,
              wire::PutSpec* s) {
  s->set_ns(ns);
  s->set_key(std::string(key));
  s->set_size(size);
  s->set_dtype(o.dtype);
  for (auto d : o.shape) s->add_shape(d);
  s->set_kind(static_cast<wire::ObjectKind>(o.kind));
  s->set_durability(static_cast<wire::Durability>(o.durability));
  if (o.tier) s->set_tier_hint(static_cast<wire::Tier>(*o.tier));
  if (o.numa_node >= 0) s->set_numa_node(o.numa_node);
  // (device_ok only from Reserve: every other put writes host memory.)
}

}  // namespace detail

using detail::Borrowed;
using detail::FillSpec;
using transport::FromWire;
using transport::MetaFromWire;

namespace {

// A get of one key in `mode`: the reply's item, once its status is OK.
Result<wire::GetResult> GetOne(detail::Borrowed& conn, const std::string& ns, std::string_view key,
                               wire::GetMode mode) {
  TIERPOOL_RETURN_IF_ERROR(conn.status());
  wire::Request req;
  auto* k = req.mutable_get()->add_keys();
  k->set_ns(ns);
  k->set_key(std::string(key));
  req.mutable_get()->set_mode(mode);
  wire::Response resp;
  TIERPOOL_RETURN_IF_ERROR(conn->Call(req, &resp));
  if (resp.get().items_size() != 1) return Status::Internal("bad get reply");
  TIERPOOL_RETURN_IF_ERROR(FromWire(resp.get().items(0).status()));
  return std::move(*resp.mutable_get()->mutable_items(0));
}

}  // namespace

// ---- ObjectView ----

ObjectView::ObjectView(ObjectView&& o) noexcept { *this = std::move(o); }
ObjectView& ObjectView::operator=(ObjectView&& o) noexcept {
  if (this != &o) {
    Release();
    conn_ = std::move(o.conn_);
    lease_id_ = std::exchange(o.lease_id_, 0);
    data_ = std::exchange(o.data_, nullptr);
    device_data_ = std::exchange(o.device_data_, nullptr);
    device_ = std::exchange(o.device_, -1);
    meta_ = std::move(o.meta_);
  }
  return *this;
}
ObjectView::~ObjectView() { Release(); }

void ObjectView::Release() {
  if (!conn_) return;
  wire::Request req;
  req.mutable_release()->add_lease_ids(lease_id_);
  conn_->SendOneWay(req);
  conn_.reset();
  data_ = nullptr;
  device_data_ = nullptr;
  device_ = -1;
}

Status ObjectView::Verify() const {
  std::uint64_t sum = 0;
  if (device_data_ != nullptr) {
    auto on_device = detail::DeviceArenas::Checksum(device_data_, size(), device_);
    if (!on_device.ok()) return on_device.status();
    sum = *on_device;
  } else {
    sum = Xxh3(data_, size());
  }
  if (sum != meta_.checksum) {
    return Status::DataLoss("checksum mismatch for '" + meta_.key + "'");
  }
  return Status::Ok();
}

// ---- WriteReservation ----

WriteReservation::WriteReservation(WriteReservation&& o) noexcept { *this = std::move(o); }
WriteReservation& WriteReservation::operator=(WriteReservation&& o) noexcept {
  if (this != &o) {
    (void)Abort();
    conn_ = std::move(o.conn_);
    reservation_id_ = std::exchange(o.reservation_id_, 0);
    data_ = std::exchange(o.data_, nullptr);
    device_data_ = std::exchange(o.device_data_, nullptr);
    device_ = std::exchange(o.device_, -1);
    size_ = std::exchange(o.size_, 0);
    tier_ = o.tier_;
    key_ = std::move(o.key_);
    options_ = std::move(o.options_);
    named_by_commit_ = o.named_by_commit_;
  }
  return *this;
}
WriteReservation::~WriteReservation() { (void)Abort(); }

Status WriteReservation::Commit() {
  if (device_data_ == nullptr) return CommitWith(Xxh3(data_, size_));
  if (!conn_) return Status::FailedPrecondition("reservation already committed or aborted");
  // The bytes are in device memory: hashed there.
  auto sum = detail::DeviceArenas::Checksum(device_data_, size_, device_);
  if (!sum.ok()) return sum.status();
  return CommitWith(*sum);
}

Status WriteReservation::CommitWith(std::uint64_t checksum) {
  if (!conn_) return Status::FailedPrecondition("reservation already committed or aborted");
  wire::Request req;
  auto* commit = req.mutable_commit();
  auto* item = commit->add_items();
  item->set_reservation_id(reservation_id_);
  item->set_checksum(checksum);
  if (named_by_commit_) FillSpec(conn_->ns, key_, size_, options_, item->mutable_spec());
  // Room for the next put like this one, staged within this round trip.
  const detail::PutShape shape(size_, options_);
  // (Never for device reservations: staged room is host memory the next put writes.)
  std::optional<detail::PutShape> asked;
  if (conn_->stage_puts && !options_.device) asked = conn_->staged.Ask(commit, conn_->ns, shape);
  wire::Response resp;
  auto conn = std::move(conn_);
  TIERPOOL_RETURN_IF_ERROR(conn->Call(req, &resp));
  if (asked) conn->staged.Keep(resp, *conn->mappings, *asked);
  if (resp.statuses().items_size() != 1) return Status::Internal("bad commit reply");
  return FromWire(resp.statuses().items(0));
}

Status WriteReservation::Abort() {
  if (!conn_) return Status::Ok();
  wire::Request req;
  req.mutable_abort()->add_reservation_ids(reservation_id_);
  wire::Response resp;
  Status s = conn_->Call(req, &resp);
  conn_.reset();
  return s;
}

// ---- Client ----

Client::Client(std::shared_ptr<detail::ClientCore> core) : core_(std::move(core)) {}
// Queued async calls use this Client: finish them before it goes.
Client::~Client() { core_->ShutdownTasks(); }

Result<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.socket_path.empty()) options.socket_path = DefaultSocketPath();
  if (options.max_connections < 1) options.max_connections = 1;
  auto core = std::make_shared<detail::ClientCore>();
  core->options = std::move(options);
  auto first = core->Open();
  if (!first.ok()) return first.status();
  core->AddFirst(std::move(first).value());
  return std::unique_ptr<Client>(new Client(std::move(core)));
}

const std::string& Client::ns() const { return core_->options.ns; }

int Client::hbm_device() const {
  return detail::DeviceArenas::Supported() ? core_->Current()->devices->Device() : -1;
}

Status Client::Put(std::string_view key, const void* data, std::size_t size,
                   const PutOptions& options) {
  if (data == nullptr && size > 0) return Status::InvalidArgument("null data");
  if (core_->copy_only() && size + 64 * 1024 > core_->max_frame_bytes()) {
    return Status::PermissionDenied(
        "this client maps none of namespace '" + core_->options.ns +
        "''s memory (the server's namespace policy), so its bytes go through frames, and " +
        std::to_string(size) + " bytes do not fit one; a namespace pool for it lifts this");
  }
  if (size <= core_->inline_threshold_bytes() || core_->copy_only()) {
    Borrowed conn(core_.get());
    TIERPOOL_RETURN_IF_ERROR(conn.status());
    wire::Request req;
    auto* item = req.mutable_put_inline()->add_items();
    FillSpec(core_->options.ns, key, size, options, item->mutable_spec());
    item->set_data(data, size);
    wire::Response resp;
    TIERPOOL_RETURN_IF_ERROR(conn->Call(req, &resp));
    if (resp.statuses().items_size() != 1) return Status::Internal("bad put reply");
    return FromWire(resp.statuses().items(0));
  }
  PutOptions host = options;
  host.device = false;  // the bytes are the caller's host memory
  auto r = Reserve(key, size, host);
  if (!r.ok()) return r.status();
  // Copy and checksum in one pass, then commit with that checksum.
  return r->CommitWith(CopyAndChecksum(r->data_, data, size, CopyTarget::kFresh));
}

Result<WriteReservation> Client::Reserve(std::string_view key, std::size_t size,
                                         const PutOptions& options) {
  Borrowed conn(core_.get());
  TIERPOOL_RETURN_IF_ERROR(conn.status());
  WriteReservation r;
  r.conn_ = conn.shared();
  r.size_ = size;
  r.key_ = std::string(key);
  r.options_ = options;
  if (options.device && !detail::DeviceArenas::Supported()) {
    return Status::Unimplemented("device reservations need a client built with -DTIERPOOL_CUDA=ON");
  }
  auto room = options.device ? std::nullopt : conn->staged.Take(detail::PutShape(size, options));
  if (room) {
    // Room this connection's last put of this size staged: no round trip now; the commit
    // names it. The key is checked there.
    r.reservation_id_ = room->reservation_id;
    r.data_ = room->data;
    r.tier_ = room->placed;
    r.named_by_commit_ = true;
    return r;
  }
  wire::Request req;
  conn->staged.GiveBack(req.mutable_reserve()->mutable_unstage());
  auto* spec = req.mutable_reserve()->add_items();
  FillSpec(core_->options.ns, key, size, options, spec);
  if (options.device) spec->set_device_ok(true);
  wire::Response resp;
  TIERPOOL_RETURN_IF_ERROR(conn->Call(req, &resp));
  if (resp.reserve().items_size() != 1) return Status::Internal("bad reserve reply");
  const auto& item = resp.reserve().items(0);
  TIERPOOL_RETURN_IF_ERROR(FromWire(item.status()));
  r.reservation_id_ = item.reservation_id();
  r.tier_ = static_cast<TierKind>(item.tier());
  if (size > 0 && options.device && r.tier_ == TierKind::kHbm &&
      conn->devices->Holds(item.extent().arena_id())) {
    auto at = conn->devices->Address(item.extent(), &r.device_);
    if (!at.ok()) return at.status();  // r's destructor aborts the reservation
    r.device_data_ = *at;
  } else if (size > 0) {
    r.data_ = conn->mappings->Address(item.extent());
    if (r.data_ == nullptr || item.extent().length() < size) {
      return Status::Internal("server reserved an extent this client cannot address");
    }
  }
  return r;
}

Result<std::size_t> Client::Get(std::string_view key, void* buffer, std::size_t capacity) {
  return Get(key, buffer, capacity, {});
}

Result<std::size_t> Client::Get(std::string_view key, void* buffer, std::size_t capacity,
                                const GetOptions& options) {
  auto results = GetBatch({GetItem{std::string(key), buffer, capacity}}, options);
  return std::move(results[0]);
}

Result<std::vector<std::byte>> Client::GetBytes(std::string_view key) {
  if (core_->copy_only()) {
    // No mapping to view: the bytes come in the reply, in one round trip, checked as copied.
    Borrowed conn(core_.get());
    auto item = GetOne(conn, core_->options.ns, key, wire::INLINE);
    if (!item.ok()) return item.status();
    std::vector<std::byte> out(item->data().size());
    if (out.empty()) return out;
    if (CopyAndChecksum(out.data(), item->data().data(), out.size()) != item->meta().checksum()) {
      return Status::DataLoss("checksum mismatch for '" + std::string(key) + "'");
    }
    return out;
  }
  auto view = GetView(key);
  if (!view.ok()) return view.status();
  std::vector<std::byte> out(view->size());
  if (out.empty()) return out;
  if (!core_->options.verify_checksums) {
    CopyBytes(out.data(), view->data(), out.size());
    return out;
  }
  // Checked in the same pass as the copy: damage is an error, never data.
  if (CopyAndChecksum(out.data(), view->data(), out.size()) != view->meta().checksum) {
    return Status::DataLoss("checksum mismatch for '" + std::string(key) + "'");
  }
  return out;
}

Result<ObjectView> Client::GetView(std::string_view key) { return GetView(key, {}); }

Result<ObjectView> Client::GetView(std::string_view key, const GetViewOptions& options) {
  return std::move(GetViews({std::string(key)}, options)[0]);
}

std::vector<Result<ObjectView>> Client::GetViews(const std::vector<std::string>& keys,
                                                 const GetViewOptions& options) {
  std::vector<Result<ObjectView>> out;
  if (keys.empty()) return out;
  Borrowed conn(core_.get());
  Status s = conn.status();
  wire::Request req;
  for (const auto& key : keys) {
    auto* k = req.mutable_get()->add_keys();
    k->set_ns(core_->options.ns);
    k->set_key(key);
  }
  req.mutable_get()->set_mode(wire::PINNED);
  if (options.tier) req.mutable_get()->set_want_tier(static_cast<wire::Tier>(*options.tier));
  if (options.device) {
    if (!detail::DeviceArenas::Supported()) {
      s = Status::Unimplemented("device views need a client built with -DTIERPOOL_CUDA=ON");
    }
    req.mutable_get()->set_device_ok(true);
  }
  wire::Response resp;
  if (s.ok()) s = conn->Call(req, &resp);
  if (s.ok() && resp.get().items_size() != static_cast<int>(keys.size())) {
    s = Status::Internal("bad get reply");
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!s.ok()) {
      out.emplace_back(s);
      continue;
    }
    const auto& item = resp.get().items(static_cast<int>(i));
    if (Status st = FromWire(item.status()); !st.ok()) {
      out.emplace_back(st);
      continue;
    }
    ObjectView v;
    v.conn_ = conn.shared();
    v.lease_id_ = item.lease_id();
    v.meta_ = MetaFromWire(item.meta());
    if (v.meta_.size > 0 && options.device && v.meta_.tier == TierKind::kHbm &&
        conn->devices->Holds(item.extent().arena_id())) {
      auto at = conn->devices->Address(item.extent(), &v.device_);
      if (!at.ok()) {
        out.emplace_back(at.status());
        continue;
      }
      v.device_data_ = *at;
    } else if (v.meta_.size > 0) {
      v.data_ = conn->mappings->ReadAddress(item.extent());
      if (v.data_ == nullptr || item.extent().length() < v.meta_.size) {
        out.emplace_back(Status::Internal("server returned an extent this client cannot address"));
        continue;
      }
    }
    out.emplace_back(std::move(v));
  }
  return out;
}

Result<ObjectMeta> Client::Stat(std::string_view key) {
  Borrowed conn(core_.get());
  auto item = GetOne(conn, core_->options.ns, key, wire::META);
  if (!item.ok()) return item.status();
  return MetaFromWire(item->meta());
}

Status Client::Delete(std::string_view key) {
  return std::move(DeleteBatch({std::string(key)})[0]);
}

std::vector<Status> Client::DeleteBatch(const std::vector<std::string>& keys) {
  std::vector<Status> out;
  Borrowed conn(core_.get());
  wire::Request req;
  for (const auto& key : keys) {
    auto* k = req.mutable_del()->add_keys();
    k->set_ns(core_->options.ns);
    k->set_key(key);
  }
  wire::Response resp;
  Status s = conn.status().ok() ? conn->Call(req, &resp) : conn.status();
  if (s.ok() && resp.statuses().items_size() != static_cast<int>(keys.size())) {
    s = Status::Internal("bad delete reply");
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    out.push_back(s.ok() ? FromWire(resp.statuses().items(static_cast<int>(i))) : s);
  }
  return out;
}

Result<std::vector<ObjectMeta>> Client::List(std::string_view prefix, std::uint32_t limit) {
  Borrowed conn(core_.get());
  TIERPOOL_RETURN_IF_ERROR(conn.status());
  std::vector<ObjectMeta> out;
  std::string start_after;
  // Pages of at most 1000, until the limit or the end.
  for (;;) {
    wire::Request req;
    auto* l = req.mutable_list();
    l->set_ns(core_->options.ns);
    l->set_prefix(std::string(prefix));
    l->set_start_after(start_after);
    l->set_limit(std::min<std::uint32_t>(1000, limit - static_cast<std::uint32_t>(out.size())));
    wire::Response resp;
    TIERPOOL_RETURN_IF_ERROR(conn->Call(req, &resp));
    for (const auto& m : resp.list().objects()) out.push_back(MetaFromWire(m));
    if (!resp.list().truncated() || out.size() >= limit || resp.list().objects_size() == 0) break;
    start_after = out.back().key;
  }
  return out;
}

Status Client::Promote(std::string_view key, TierKind target) {
  Borrowed conn(core_.get());
  TIERPOOL_RETURN_IF_ERROR(conn.status());
  wire::Request req;
  auto* k = req.mutable_promote()->add_keys();
  k->set_ns(core_->options.ns);
  k->set_key(std::string(key));
  req.mutable_promote()->set_target(static_cast<wire::Tier>(target));
  wire::Response resp;
  TIERPOOL_RETURN_IF_ERROR(conn->Call(req, &resp));
  if (resp.statuses().items_size() != 1) return Status::Internal("bad promote reply");
  return FromWire(resp.statuses().items(0));
}

Result<ServerStats> Client::ServerStat(const StatOptions& options) {
  Borrowed conn(core_.get());
  TIERPOOL_RETURN_IF_ERROR(conn.status());
  wire::Request req;
  req.mutable_stat()->set_reset_peaks(options.reset_peaks);
  if (options.moves_since_us) req.mutable_stat()->set_moves_since_us(*options.moves_since_us);
  wire::Response resp;
  TIERPOOL_RETURN_IF_ERROR(conn->Call(req, &resp));
  ServerStats s;
  s.server_version = resp.stat().server_version();
  s.uptime_ms = resp.stat().uptime_ms();
  for (const auto& t : resp.stat().tiers()) {
    s.tiers.push_back({static_cast<TierKind>(t.tier()), t.capacity(), t.used_bytes(),
                       t.object_count(), t.free_extents(), t.largest_free_extent(),
                       t.fragmentation(), t.high_watermark(), t.low_watermark(), t.pages_locked(),
                       t.backend(), t.failed_allocations(), t.state(), t.read_errors(),
                       t.write_errors(), t.checksum_failures(), t.peak_used_bytes()});
  }
  for (const auto& c : resp.stat().counters()) s.counters.emplace_back(c.name(), c.value());
  for (const auto& m : resp.stat().moves()) {
    s.moves.push_back({static_cast<TierKind>(m.from()), static_cast<TierKind>(m.to()), m.bytes(),
                       m.started_us(), m.finished_us(), m.ok()});
  }
  for (const auto& m : resp.stat().members()) {
    s.members.push_back({m.node_id(), m.incarnation(), m.peer_address(), m.lend_bytes(),
                         m.lend_free(), m.granted_to_us(), m.used_by_us(), m.responsive(),
                         m.failures(), m.self(), m.transport()});
  }
  for (const auto& j : resp.stat().jobs()) {
    JobInfo info{j.id(),
                 j.ns(),
                 j.name(),
                 j.hbm_budget_bytes(),
                 j.iteration(),
                 j.step(),
                 j.pending_prefetches(),
                 {}};
    for (const auto& c : j.counters()) info.counters.emplace_back(c.name(), c.value());
    s.jobs.push_back(std::move(info));
  }
  return s;
}

std::future<Status> Client::PutAsync(std::string key, const void* data, std::size_t size,
                                     PutOptions options) {
  auto task = std::make_shared<std::packaged_task<Status()>>(
      [this, key = std::move(key), data, size, options = std::move(options)] {
        return Put(key, data, size, options);
      });
  auto f = task->get_future();
  core_->Submit([task] { (*task)(); });
  return f;
}

std::future<Result<std::size_t>> Client::GetAsync(std::string key, void* buffer,
                                                  std::size_t capacity) {
  auto task = std::make_shared<std::packaged_task<Result<std::size_t>()>>(
      [this, key = std::move(key), buffer, capacity] { return Get(key, buffer, capacity); });
  auto f = task->get_future();
  core_->Submit([task] { (*task)(); });
  return f;
}

std::future<std::vector<Status>> Client::PutBatchAsync(std::vector<PutItem> items) {
  auto task = std::make_shared<std::packaged_task<std::vector<Status>()>>(
      [this, items = std::move(items)] { return PutBatch(items); });
  auto f = task->get_future();
  core_->Submit([task] { (*task)(); });
  return f;
}

std::future<std::vector<Result<std::size_t>>> Client::GetBatchAsync(std::vector<GetItem> items) {
  auto task = std::make_shared<std::packaged_task<std::vector<Result<std::size_t>>()>>(
      [this, items = std::move(items)] { return GetBatch(items); });
  auto f = task->get_future();
  core_->Submit([task] { (*task)(); });
  return f;
}

}  // namespace tierpool
