// Staged reservations: room made for a connection's next put before it has a name, so that the
// put costs one round trip (copy into the staged extent, commit naming it) instead of two
// (reserve, then commit). A put of any size up to the room's may take it; the rest of the room
// goes back to its tier as the commit names it. The class and its locking: store/object_store.h;
// the wire side: CommitRequest in transport/proto/tierpool.proto.
#include "common/units.h"
#include "store/object_store.h"

namespace tierpool {

Result<Reservation> ObjectStore::Stage(const PutSpec& spec, std::uint64_t owner) {
  TIERPOOL_RETURN_IF_ERROR(CheckPutSpec(spec, /*named=*/false));
  if (spec.size == 0) return Status::InvalidArgument("an empty object needs no staged room");
  if (spec.size > config_.max_staged_bytes) {
    return Status::InvalidArgument("staged room is for puts of at most " +
                                   FormatBytes(config_.max_staged_bytes));
  }
  // Staged room has no key: the copy for the shared path's taking is of a few short names.
  PutSpec mine = spec;
  if (auto r = TryReserveShared(mine, owner, /*staged=*/true)) {
    reservations_staged_.Add(owner);
    return *r;
  }
  std::lock_guard lock(mu_);
  if (const std::uint64_t staged = index_.HoldingsOf(owner).staged;
      staged >= config_.max_staged_per_client) {
    ++counters_.client_limit_refusals;
    return Status::ResourceExhausted("this connection has " + std::to_string(staged) +
                                     " staged reservations (the limit)");
  }
  TIERPOOL_RETURN_IF_ERROR(AdmitReserveLocked(spec, owner));
  const TierKind kind = spec.tier_hint.value_or(TierKind::kDram);
  Tier* t = tier(kind);
  if (t == nullptr || t->capacity() == 0) {
    return Status::FailedPrecondition(std::string(TierName(kind)) + " tier is off");
  }
  if (kind == TierKind::kHbm && planned_ns_.count(spec.ns) != 0) {
    // A planned namespace's hbm room is the executor's budget, which a put may wait for.
    return Status::FailedPrecondition("puts into a planned namespace's hbm are not staged");
  }
  TIERPOOL_RETURN_IF_ERROR(WithinTierQuotaLocked(spec.ns, kind, spec.size));
  const std::uint32_t pool = PoolOfLocked(spec.ns);
  // Free room only: staging never moves or drops anything, and never pushes a tier over its
  // high watermark (which would start demotions for room nobody has asked for yet).
  auto extent = t->Allocate(spec.size, {spec.numa_node, pool});
  if (!extent.ok()) return extent.status();
  if (policy_->OverWatermark(kind, pool, 0) > 0) {
    (void)t->Free(*extent);
    return Status::ResourceExhausted("no room below " + std::string(TierName(kind)) +
                                     "'s high watermark to stage " + FormatBytes(spec.size));
  }
  StoredObject& obj = index_.AddReservation(MetaOf(PutSpec(spec), kind), owner, /*expiry_us=*/0);
  obj.pool = pool;
  index_.SetCopy(obj, kind, *extent);
  reservations_staged_.Add(owner);
  return Reservation{obj.id, *extent, kind};
}

Status ObjectStore::BindStagedLocked(StoredObject& obj, const PutSpec& name) {
  Status s = CheckPutSpec(name, /*named=*/true);
  if (s.ok() && !StagedRoomTakes(obj, name)) {
    s = Status::InvalidArgument("reservation " + std::to_string(obj.id) + " was staged for " +
                                FormatBytes(obj.meta.size) + " in namespace '" + obj.meta.ns +
                                "', not for " + FormatBytes(name.size) + " in '" + name.ns + "'");
  }
  if (s.ok()) s = NameStagedRoom(obj, name);
  if (!s.ok()) {
    FreeReservationLocked(obj.id);
    return s;
  }
  obj.up_on_commit = name.tier_hint == TierKind::kHbm && on_device(TierKind::kHbm);
  return Status::Ok();
}

bool ObjectStore::StagedRoomTakes(const StoredObject& room, const PutSpec& name) {
  return name.ns == room.meta.ns && name.size > 0 && name.size <= room.meta.size;
}

Status ObjectStore::NameStagedRoom(StoredObject& room, const PutSpec& name) {
  if (name.size < room.meta.size) {
    // A smaller put took it: the room past its bytes goes back to the tier now.
    const TierKind kind = room.meta.tier;
    auto kept = tier(kind)->Trim(room.copy(kind).extent, name.size);
    if (!kept.ok()) return kept.status();
    index_.ShrinkReservation(room, name.size, kind, *kept);
  }
  room.meta.key = name.key;
  room.meta.dtype = name.dtype;
  room.meta.shape = name.shape;
  room.meta.kind = name.kind;
  room.meta.durability = name.durability;
  return Status::Ok();
}

}  // namespace tierpool
