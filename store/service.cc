#include "store/service.h"

#include "store/cluster.h"

#include "common/logging.h"
#include "common/no_wait_scope.h"
#include "store/packed_items.h"
#include "store/service_wire.h"
#include "transport/wire_meta.h"

namespace tierpool {

using transport::ToWire;

Status ServiceConfig::validate() const {
  if (inline_threshold_bytes > max_frame_bytes / 2) {
    return Status::InvalidArgument("inline threshold must be at most half the frame limit");
  }
  if (max_batch_items == 0) return Status::InvalidArgument("max batch items must be > 0");
  return Status::Ok();
}

StoreService::StoreService(ServiceConfig config, ObjectStore* store)
    : config_(config), store_(store) {}

namespace {

PutSpec FromWire(const wire::PutSpec& w) {
  PutSpec s;
  s.ns = w.ns();
  s.key = w.key();
  s.size = w.size();
  s.dtype = w.dtype();
  s.shape.assign(w.shape().begin(), w.shape().end());
  s.kind = static_cast<ObjectKind>(w.kind());
  s.durability = static_cast<Durability>(w.durability());
  if (w.has_tier_hint()) s.tier_hint = static_cast<TierKind>(w.tier_hint());
  s.numa_node = w.has_numa_node() ? w.numa_node() : -1;
  s.device_ok = w.device_ok();
  return s;
}

Status CheckBatchSize(std::size_t n, std::uint32_t max) {
  if (n > max) {
    return Status::InvalidArgument("batch of " + std::to_string(n) +
                                   " items exceeds the limit of " + std::to_string(max));
  }
  return Status::Ok();
}
template <typename Items>
Status CheckBatch(const Items& items, std::uint32_t max) {
  return CheckBatchSize(static_cast<std::size_t>(items.size()), max);
}

// Enum values from the wire are checked: an out-of-range value is an error, not a cast.
Status CheckSpec(const wire::PutSpec& w) {
  if (!wire::ObjectKind_IsValid(w.kind())) return Status::InvalidArgument("unknown object kind");
  if (!wire::Durability_IsValid(w.durability())) {
    return Status::InvalidArgument("unknown durability class");
  }
  if (w.has_tier_hint() && !wire::Tier_IsValid(w.tier_hint())) {
    return Status::InvalidArgument("unknown tier");
  }
  return Status::Ok();
}

// A reservation (or why there is none) as one item of a reserve or staged reply.
void ToWire(const Result<Reservation>& r, wire::ReserveResult* out) {
  if (!r.ok()) {
    ToWire(r.status(), out->mutable_status());
    return;
  }
  out->set_reservation_id(r->id);
  ToWire(r->extent, out->mutable_extent());
  out->set_tier(static_cast<wire::Tier>(r->tier));
}

}  // namespace

// A put's spec from the wire, once its enums are valid and this peer maps its namespace.
Result<PutSpec> StoreService::CheckedSpec(const transport::PeerCredentials& peer,
                                          const wire::PutSpec& w) const {
  TIERPOOL_RETURN_IF_ERROR(CheckSpec(w));
  if (!MapsNamespace(peer, w.ns())) return NotMapped(w.ns());
  return FromWire(w);
}

bool StoreService::Holds(std::uint64_t session) {
  return store_->Holds(session) || (plans_ != nullptr && plans_->HasJobs(session));
}

Status StoreService::CheckNamespaces(const transport::PeerCredentials& peer,
                                     const wire::Request& req) {
  if (policy_ == nullptr) return Status::Ok();
  std::vector<const std::string*> seen;  // a batch names few namespaces: check each once
  Status denied;
  auto check = [&](const std::string& ns) {
    for (const std::string* s : seen) {
      if (*s == ns) return;
    }
    seen.push_back(&ns);
    if (denied.ok() && !policy_->Allows(peer, ns)) {
      denied = Status::PermissionDenied("uid " + std::to_string(peer.uid) +
                                        " may not use namespace '" + ns + "'");
    }
  };
  switch (req.body_case()) {
    case wire::Request::kReserve:
      for (const auto& i : req.reserve().items()) check(i.ns());
      if (req.reserve().has_packed()) check(req.reserve().packed().spec().ns());
      break;
    case wire::Request::kPutInline:
      for (const auto& i : req.put_inline().items()) check(i.spec().ns());
      break;
    case wire::Request::kGet:
      for (const auto& k : req.get().keys()) check(k.ns());
      if (req.get().has_packed_keys()) check(req.get().packed_keys().ns());
      break;
    case wire::Request::kDel:
      for (const auto& k : req.del().keys()) check(k.ns());
      break;
    case wire::Request::kPromote:
      for (const auto& k : req.promote().keys()) check(k.ns());
      break;
    case wire::Request::kList: {
      static const std::string kAll = "*";
      check(req.list().all_namespaces() ? kAll : req.list().ns());
      break;
    }
    case wire::Request::kRegisterPlan:
      check(req.register_plan().ns());
      break;
    default:  // the rest name reservations, leases or jobs the connection owns, or nothing
      break;
  }
  return denied;
}

bool StoreService::Handle(std::uint64_t session, const transport::PeerCredentials& peer,
                          const wire::Request& req, wire::Response* resp, std::vector<int>* fds) {
  const auto started = std::chrono::steady_clock::now();
  const bool reply = HandleRequest(session, peer, req, resp, fds);
  // A name of the last good snapshot removed: answered once that is on disk (a crash must not
  // bring back what a client was told is gone).
  if (journal_ != nullptr) journal_->WaitForCaller();
  // Refused a wait on an I/O thread: a worker carries it on, and records the latency then.
  if (WaitRefused()) return reply;
  RecordLatency(req, *resp,
                static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                               std::chrono::steady_clock::now() - started)
                                               .count()));
  return reply;
}

// A batch counts once, in the size class of its total bytes. A commit's size is not in the
// request: commits are one class ("any size", the last).
void StoreService::RecordLatency(const wire::Request& req, const wire::Response& resp,
                                 std::uint64_t took_us) {
  std::uint64_t bytes = 0;
  LatencyOp op;
  switch (req.body_case()) {
    case wire::Request::kPutInline:
      op = kPutOp;
      for (const auto& item : req.put_inline().items()) bytes += item.data().size();
      break;
    case wire::Request::kGet:
      if (req.get().mode() == wire::META) return;
      op = kGetOp;
      for (const auto& item : resp.get().items()) bytes += item.meta().size();
      break;
    case wire::Request::kReserve:
      op = kReserveOp;
      for (const auto& item : req.reserve().items()) bytes += item.size();
      for (std::uint64_t size : req.reserve().packed().sizes()) bytes += size;
      break;
    case wire::Request::kCommit:
      op = kCommitOp;
      bytes = ~std::uint64_t{0};
      break;
    default:
      return;
  }
  latency_[op][SizeClassOf(bytes)].Record(took_us);
}

bool StoreService::HandleRequest(std::uint64_t session, const transport::PeerCredentials& peer,
                                 const wire::Request& req, wire::Response* resp,
                                 std::vector<int>* fds) {
  const Call call{session, peer, req, resp, fds};
  if (Status s = CheckNamespaces(peer, req); !s.ok()) {
    ToWire(s, resp->mutable_status());
    return true;
  }
  if (Status s = store_->CheckOwner(session); !s.ok()) {
    if (req.body_case() == wire::Request::kRelease || req.body_case() == wire::Request::kProgress) {
      return false;  // one-way: nothing to answer
    }
    ToWire(s, resp->mutable_status());
    return true;
  }
  switch (req.body_case()) {
    case wire::Request::kHello:
      return OnHello(call);
    case wire::Request::kReserve:
      return OnReserve(call);
    case wire::Request::kCommit:
      return OnCommit(call);
    case wire::Request::kAbort:
      return OnAbort(call);
    case wire::Request::kPutInline:
      return OnPutInline(call);
    case wire::Request::kGet:
      return OnGet(call);
    case wire::Request::kRelease:
      return OnRelease(call);
    case wire::Request::kDel:
      return OnDel(call);
    case wire::Request::kList:
      return OnList(call);
    case wire::Request::kStat:
      return OnStat(call);
    case wire::Request::kPromote:
      return OnPromote(call);
    case wire::Request::kRegisterPlan:
      if (plans_ == nullptr) break;
      return OnRegisterPlan(call);
    case wire::Request::kProgress:
      return OnProgress(call);
    case wire::Request::kUnregisterPlan:
      if (plans_ == nullptr) break;
      return OnUnregisterPlan(call);
    case wire::Request::kOpenRing:  // the transport's own (unix_session.cc)
    case wire::Request::BODY_NOT_SET:
      break;
  }
  ToWire(Status::Unimplemented("unknown message type"), resp->mutable_status());
  return true;
}

// The handshake: protocol check, the arenas the peer may map (their descriptors in fds), limits.
bool StoreService::OnHello(const Call& call) {
  const std::uint64_t session = call.session;
  const transport::PeerCredentials& peer = call.peer;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  std::vector<int>* fds = call.fds;
  if (req.hello().protocol_version() != transport::kProtocolVersion) {
    ToWire(Status::FailedPrecondition(
               "client speaks protocol " + std::to_string(req.hello().protocol_version()) +
               ", this server speaks " + std::to_string(transport::kProtocolVersion)),
           resp->mutable_status());
    return true;
  }
  auto* h = resp->mutable_hello();
  h->set_protocol_version(transport::kProtocolVersion);
  h->set_server_version(TIERPOOL_VERSION);
  h->set_session_id(session);
  h->set_incarnation(incarnation_);
  store_->SetOwnerIdentity(session, {peer.pid, peer.uid});
  // Only the arenas of pools the peer may map: the rest of the memory stays out of its
  // reach, whatever it sends later.
  for (const auto& a : store_->Arenas()) {
    if (!MapsPool(peer, a.pool)) continue;
    auto* w = h->add_arenas();
    w->set_id(a.id);
    w->set_tier(static_cast<wire::Tier>(a.tier));
    w->set_size(a.size);
    w->set_numa_node(a.numa_node);
    w->set_pool(a.pool);
    w->set_fd_index(a.fd >= 0 ? static_cast<int>(fds->size()) : -1);
    if (a.fd >= 0) fds->push_back(a.fd);
    w->set_read_only_fd_index(a.read_only_fd >= 0 ? static_cast<int>(fds->size()) : -1);
    if (a.read_only_fd >= 0) fds->push_back(a.read_only_fd);
    if (a.device >= 0) {
      w->set_cuda_device(a.device);
      w->set_cuda_ipc_handle(a.ipc_handle);
    }
  }
  h->set_copy_only(!req.hello().ns().empty() && !MapsNamespace(peer, req.hello().ns()));
  h->set_staged_room_fits_smaller(true);
  h->set_packed_puts(true);
  h->set_packed_gets(true);
  h->set_packed_get_results(true);
  h->set_packed_reserve_results(true);
  auto* l = h->mutable_limits();
  l->set_max_frame_bytes(config_.max_frame_bytes);
  l->set_max_key_bytes(store_->config().max_key_bytes);
  l->set_max_namespace_bytes(store_->config().max_namespace_bytes);
  l->set_max_object_bytes(store_->config().max_object_bytes);
  l->set_inline_threshold_bytes(config_.inline_threshold_bytes);
  l->set_max_batch_items(config_.max_batch_items);
  return true;
}

// Room for puts, item by item; carried on from the first unanswered item on a worker.
bool StoreService::OnReserve(const Call& call) {
  const std::uint64_t session = call.session;
  const transport::PeerCredentials& peer = call.peer;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  const auto& items = req.reserve().items();
  auto packed = req.reserve().has_packed() ? PackedPuts::Of(req.reserve().packed())
                                           : Result<PackedPuts>(PackedPuts());
  const Status batch = packed.ok()
                           ? CheckBatchSize(static_cast<std::size_t>(items.size() + packed->size()),
                                            config_.max_batch_items)
                           : packed.status();
  if (!batch.ok()) {
    ToWire(batch, resp->mutable_status());
    return true;
  }
  // What the packed items share, checked once.
  const Result<PutSpec> shared = packed->size() > 0
                                     ? CheckedSpec(peer, req.reserve().packed().spec())
                                     : Result<PutSpec>(PutSpec());
  auto* reply = resp->mutable_reserve();
  // The items that got room go in reply->packed when the client reads them there, the
  // refused ones in reply->items with their positions listed.
  const bool pack = req.reserve().packed_results();
  wire::PackedReserveResults* rooms = pack ? reply->mutable_packed() : nullptr;
  const int answered = reply->items_size() + (pack ? rooms->reservation_ids_size() : 0);
  // Staged room the client no longer wants goes first: it must not count against these.
  // (Once: a request carried on on a worker after a refused wait resumes at its first
  // unanswered item, below.)
  if (answered == 0) {
    for (auto id : req.reserve().unstage()) (void)store_->Abort(id, session);
  }
  for (int i = answered; i < items.size() + packed->size(); ++i) {
    Result<PutSpec> spec = i < items.size() ? CheckedSpec(peer, items[i]) : shared;
    if (i >= items.size() && spec.ok()) {
      const int j = i - items.size();
      spec->key = packed->key(j);
      spec->size = packed->object_size(j);
    }
    auto r =
        spec.ok() ? store_->Reserve(std::move(*spec), session) : Result<Reservation>(spec.status());
    if (WaitRefused()) return true;  // carried on from item i on a worker
    if (pack && r.ok()) {
      rooms->add_reservation_ids(r->id);
      rooms->add_arena_ids(r->extent.arena_id);
      rooms->add_offsets(r->extent.offset);
      rooms->add_lengths(r->extent.length);
      continue;
    }
    if (pack) rooms->add_positions(static_cast<std::uint32_t>(i));
    ToWire(r, reply->add_items());
  }
  return true;
}

// Puts whose bytes are in their room: named, and staged room asked for.
bool StoreService::OnCommit(const Call& call) {
  const std::uint64_t session = call.session;
  const transport::PeerCredentials& peer = call.peer;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  const auto& items = req.commit().items();
  if (Status s = CheckBatch(items, config_.max_batch_items); !s.ok()) {
    ToWire(s, resp->mutable_status());
    return true;
  }
  if (Status s = CheckBatch(req.commit().stage(), config_.max_batch_items); !s.ok()) {
    ToWire(s, resp->mutable_status());
    return true;
  }
  auto* reply = resp->mutable_statuses();
  for (const auto& item : items) {
    Status s;
    if (!item.has_spec()) {
      s = store_->Commit(item.reservation_id(), item.checksum(), session);
    } else if (auto name = CheckedSpec(peer, item.spec()); name.ok()) {
      s = store_->Commit(item.reservation_id(), item.checksum(), session, &*name);
    } else {
      s = name.status();
      (void)store_->Abort(item.reservation_id(), session);  // a failed naming frees it
    }
    ToWire(s, reply->add_items());
  }
  for (auto id : req.commit().unstage()) (void)store_->Abort(id, session);
  for (const auto& item : req.commit().stage()) {
    auto spec = CheckedSpec(peer, item);
    ToWire(spec.ok() ? store_->Stage(*spec, session) : Result<Reservation>(spec.status()),
           resp->mutable_staged()->add_items());
  }
  return true;
}

// Reservations given up.
bool StoreService::OnAbort(const Call& call) {
  const std::uint64_t session = call.session;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  auto* reply = resp->mutable_statuses();
  for (auto id : req.abort().reservation_ids()) {
    ToWire(store_->Abort(id, session), reply->add_items());
  }
  return true;
}

// Puts whose bytes are in the frame.
bool StoreService::OnPutInline(const Call& call) {
  const std::uint64_t session = call.session;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  const auto& items = req.put_inline().items();
  if (Status s = CheckBatch(items, config_.max_batch_items); !s.ok()) {
    ToWire(s, resp->mutable_status());
    return true;
  }
  auto* reply = resp->mutable_statuses();
  for (int i = reply->items_size(); i < items.size(); ++i) {
    const auto& item = items[i];
    Status s = CheckSpec(item.spec());
    if (s.ok() && item.data().size() != item.spec().size()) {
      s = Status::InvalidArgument("inline put of " + item.spec().key() + " declares " +
                                  std::to_string(item.spec().size()) + " bytes but carries " +
                                  std::to_string(item.data().size()));
    }
    if (s.ok()) s = store_->PutCopy(FromWire(item.spec()), item.data().data(), session);
    if (WaitRefused()) return true;  // carried on from item i on a worker
    ToWire(s, reply->add_items());
  }
  return true;
}

// Gets, plain and packed (HandleGet).
bool StoreService::OnGet(const Call& call) {
  const std::uint64_t session = call.session;
  const transport::PeerCredentials& peer = call.peer;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  auto keys = GetKeys::Of(req.get());
  const Status batch =
      keys.ok() ? CheckBatchSize(static_cast<std::size_t>(keys->size()), config_.max_batch_items)
                : keys.status();
  if (!batch.ok()) {
    ToWire(batch, resp->mutable_status());
    return true;
  }
  HandleGet(session, peer, req.get(), *keys, resp->mutable_get());
  return true;
}

// Leases let go (one-way).
bool StoreService::OnRelease(const Call& call) {
  const std::uint64_t session = call.session;
  const wire::Request& req = call.req;
  const auto& ids = req.release().lease_ids();
  Status s = store_->ReleaseAll({ids.data(), static_cast<std::size_t>(ids.size())}, session);
  if (!s.ok()) spdlog::debug("session {}: release: {}", session, s.ToString());
  return false;  // one-way
}

// Deletes.
bool StoreService::OnDel(const Call& call) {
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  if (Status s = CheckBatch(req.del().keys(), config_.max_batch_items); !s.ok()) {
    ToWire(s, resp->mutable_status());
    return true;
  }
  auto* reply = resp->mutable_statuses();
  for (const auto& k : req.del().keys())
    ToWire(store_->Delete(k.ns(), k.key()), reply->add_items());
  return true;
}

// Names, a page at a time.
bool StoreService::OnList(const Call& call) {
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  const auto& l = req.list();
  bool truncated = false;
  auto objects =
      store_->List(l.ns(), l.prefix(), l.start_after(), std::min<std::uint32_t>(l.limit(), 10000),
                   l.all_namespaces(), &truncated);
  auto* reply = resp->mutable_list();
  for (const auto& m : objects) ToWire(m, reply->add_objects());
  reply->set_truncated(truncated);
  return true;
}

// The server's stat, and the mover's recent moves when asked.
bool StoreService::OnStat(const Call& call) {
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  Stat(resp->mutable_stat());
  if (req.stat().has_moves_since_us()) {
    // At most the mover's history (65,536 moves): well within a frame.
    for (const auto& m : store_->RecentMoves(req.stat().moves_since_us())) {
      auto* w = resp->mutable_stat()->add_moves();
      w->set_from(static_cast<wire::Tier>(m.from));
      w->set_to(static_cast<wire::Tier>(m.to));
      w->set_bytes(m.bytes);
      w->set_started_us(m.started_us);
      w->set_finished_us(m.finished_us);
      w->set_ok(m.ok);
    }
  }
  if (req.stat().reset_peaks()) store_->ResetPeaks();
  return true;
}

// Moves up to a tier, waited for.
bool StoreService::OnPromote(const Call& call) {
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  if (!wire::Tier_IsValid(req.promote().target())) {
    ToWire(Status::InvalidArgument("unknown tier"), resp->mutable_status());
    return true;
  }
  if (Status s = CheckBatch(req.promote().keys(), config_.max_batch_items); !s.ok()) {
    ToWire(s, resp->mutable_status());
    return true;
  }
  auto target = static_cast<TierKind>(req.promote().target());
  auto* reply = resp->mutable_statuses();
  for (const auto& k : req.promote().keys()) {
    ToWire(store_->Promote(k.ns(), k.key(), target), reply->add_items());
  }
  return true;
}

// A job's plan (plans_ set).
bool StoreService::OnRegisterPlan(const Call& call) {
  const std::uint64_t session = call.session;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  auto id = plans_->Register(req.register_plan(), session);
  if (!id.ok()) {
    ToWire(id.status(), resp->mutable_status());
  } else {
    resp->mutable_register_plan()->set_job_id(*id);
  }
  return true;
}

// A job's step (one-way).
bool StoreService::OnProgress(const Call& call) {
  const std::uint64_t session = call.session;
  const wire::Request& req = call.req;
  if (plans_ != nullptr) {
    const auto& p = req.progress();
    Status s =
        plans_->PostProgress(p.job_id(), session, p.iteration(), p.step(), p.outside_bytes());
    if (!s.ok()) spdlog::debug("session {}: progress: {}", session, s.ToString());
  }
  return false;  // one-way
}

// A job's plan ended (plans_ set).
bool StoreService::OnUnregisterPlan(const Call& call) {
  const std::uint64_t session = call.session;
  const wire::Request& req = call.req;
  wire::Response* resp = call.resp;
  ToWire(plans_->Unregister(req.unregister_plan().job_id(), session), resp->mutable_status());
  return true;
}

bool StoreService::MapsPool(const transport::PeerCredentials& peer, std::uint32_t pool) const {
  return policy_ == nullptr || policy_->MapsPool(peer, pool);
}

bool StoreService::MapsNamespace(const transport::PeerCredentials& peer,
                                 const std::string& ns) const {
  return policy_ == nullptr || policy_->MapsNamespace(peer, ns);
}

Status StoreService::NotMapped(const std::string& ns) {
  return Status::PermissionDenied(
      "this connection does not map the memory of namespace '" + ns +
      "' (the namespace policy gives its user no pool holding it): put and get its bytes "
      "through frames (inline) instead");
}

void StoreService::OnDisconnect(std::uint64_t session_id) {
  if (plans_ != nullptr) plans_->OnDisconnect(session_id);  // a job that disconnects loses its plan
  store_->ReleaseOwner(session_id);
}

}  // namespace tierpool
