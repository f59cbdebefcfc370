#include "store/object_index.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/thread_slot.h"

namespace tierpool {

std::uint32_t StoredObject::pins() const {
  std::uint32_t n = 0;
  for (const auto& c : copies) n += c.pins;
  return n;
}

int StoredObject::present_copies() const {
  int n = 0;
  for (const auto& c : copies) n += c.present ? 1 : 0;
  return n;
}

int ObjectIndex::PartOf(std::string_view ns, std::string_view key) {
  // The key's hash, mixed with the namespace's length: names that differ only in their
  // namespace are rare enough to share a part.
  const std::size_t h = std::hash<std::string_view>()(key) ^ (ns.size() * 0x9e3779b97f4a7c15ull);
  return static_cast<int>((h >> 7) % kParts);
}

std::uint64_t ObjectIndex::NextId() {
  IdSlot& slot = id_slots_[ThreadSlot() % kIdSlots];
  std::lock_guard lock(slot.mu);
  if (slot.next == slot.end) {
    slot.next = next_block_.fetch_add(1, std::memory_order_relaxed) * kIdBlock;
    slot.end = slot.next + kIdBlock;
  }
  return slot.next++;
}

std::uint64_t ObjectIndex::NextUse() {
  thread_local std::uint64_t last = 0;
  const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch());
  last = std::max(static_cast<std::uint64_t>(now.count()), last + 1);
  return last;
}

StoredObject* ObjectIndex::Find(std::uint64_t id) {
  ObjectShard& shard = ObjectShardOf(id);
  std::lock_guard lock(shard.mu);
  auto it = shard.objects.find(id);
  return it == shard.objects.end() ? nullptr : it->second.get();
}

StoredObject* ObjectIndex::Lookup(const std::string& ns, const std::string& key) {
  return WithName(ns, key, [](StoredObject* obj) { return obj; });
}

bool ObjectIndex::IsReservation(std::uint64_t id) {
  // The flag changes under its owner's lock; the owner is known only from the object, which
  // holders of mu_ shared never free while it is a reservation.
  StoredObject* obj = Find(id);
  if (obj == nullptr) return false;
  const OwnerPart& op = OwnerPartOf(obj->owner);
  std::lock_guard lock(op.mu);
  return obj->reservation;
}

// --- reservations ---------------------------------------------------------------------------

namespace {

template <ReservationLinks StoredObject::*Links>
void Append(ReservationList& list, StoredObject& obj) {
  (obj.*Links).prev = list.tail;
  (obj.*Links).next = nullptr;
  if (list.tail != nullptr) {
    (list.tail->*Links).next = &obj;
  } else {
    list.head = &obj;
  }
  list.tail = &obj;
}

template <ReservationLinks StoredObject::*Links>
void Remove(ReservationList& list, StoredObject& obj) {
  ReservationLinks& l = obj.*Links;
  if (l.prev != nullptr) {
    (l.prev->*Links).next = l.next;
  } else {
    list.head = l.next;
  }
  if (l.next != nullptr) {
    (l.next->*Links).prev = l.prev;
  } else {
    list.tail = l.prev;
  }
  l = {};
}

}  // namespace

void ObjectIndex::RecordReservation(OwnerPart& op, StoredObject& obj, int sign) {
  auto it = op.owners.try_emplace(obj.owner).first;
  OwnerHoldings& h = it->second.holdings;
  if (sign > 0) {
    ++op.reservations;
    if (obj.expiry_us != 0) Append<&StoredObject::due_links>(op.due, obj);
    Append<&StoredObject::owner_links>(it->second.reservations, obj);
    ++h.reservations;
    h.reserved_bytes += obj.meta.size;
    h.staged += obj.staged ? 1 : 0;
  } else {
    --op.reservations;
    // In the deadline list exactly while it has one (ClearReservationDeadline takes it out).
    if (obj.expiry_us != 0) Remove<&StoredObject::due_links>(op.due, obj);
    Remove<&StoredObject::owner_links>(it->second.reservations, obj);
    --h.reservations;
    h.reserved_bytes -= obj.meta.size;
    h.staged -= obj.staged ? 1 : 0;
  }
  if (h.reservations == 0) op.owners.erase(it);
}

OwnerHoldings ObjectIndex::HoldingsIn(const OwnerPart& op, std::uint64_t owner) {
  auto it = op.owners.find(owner);
  return it == op.owners.end() ? OwnerHoldings{} : it->second.holdings;
}

StoredObject& ObjectIndex::AddReservation(ObjectMeta meta, std::uint64_t owner,
                                          std::uint64_t expiry_us) {
  auto obj = std::make_unique<StoredObject>();
  obj->meta = std::move(meta);
  obj->id = NextId();
  obj->owner = owner;
  obj->expiry_us = expiry_us;
  obj->reservation = true;
  obj->staged = obj->meta.key.empty();
  {
    OwnerPart& op = OwnerPartOf(owner);
    std::lock_guard lock(op.mu);
    RecordReservation(op, *obj, +1);
  }
  return *Publish(obj, std::nullopt, nullptr);
}

StoredObject* ObjectIndex::Publish(std::unique_ptr<StoredObject>& obj, std::optional<TierKind> tier,
                                   const Extent* extent, bool limited) {
  StoredObject& ref = *obj;
  // The part of the thread that makes it, not its name's: a thread that replaces what it wrote
  // (a KV block, a step's activations) then keeps the object's candidate sets and counts in
  // lines its own core holds, and only the name's entry is shared with other threads' puts.
  ref.part = ThreadSlot() % kParts;
  {
    Part& part = parts_[ref.part];
    std::lock_guard lock(part.mu);
    auto [entry, fresh] = part.ns_usage.try_emplace(ref.meta.ns);
    PartNamespaceCounts& counts = entry->second;
    if (fresh) counts.total = limits_.Attach(ref.meta.ns);
    if (limited && limits_.Near(*counts.total)) {
      if (fresh) {
        limits_.Detach(ref.meta.ns, counts.total, 0);
        part.ns_usage.erase(entry);
      }
      return nullptr;
    }
    ref.ns_counts = &counts;
    ++counts.objects;
    ++part.objects;
    ObjectCountLimits::Count(&counts.unflushed, &counts.total->objects, 1);
    ObjectCountLimits::Count(&part.unflushed, limits_.total(), 1);
    CountNs(part, ref, static_cast<std::int64_t>(ref.meta.size), 0);
    if (tier) SetCopyIn(part, ref, *tier, *extent);
  }
  ObjectShard& shard = ObjectShardOf(ref.id);
  std::lock_guard lock(shard.mu);
  shard.objects.emplace(ref.id, std::move(obj));
  return &ref;
}

void ObjectIndex::EraseReservation(std::uint64_t id) {
  StoredObject* obj = Find(id);
  if (obj == nullptr) return;
  OwnerPart& op = OwnerPartOf(obj->owner);
  std::lock_guard lock(op.mu);
  if (!obj->reservation) return;
  obj->reservation = false;
  RecordReservation(op, *obj, -1);
}

void ObjectIndex::ShrinkReservation(StoredObject& obj, std::uint64_t size, TierKind tier,
                                    const Extent& extent) {
  const auto less = static_cast<std::int64_t>(obj.meta.size - size);
  {
    OwnerPart& op = OwnerPartOf(obj.owner);
    std::lock_guard lock(op.mu);
    if (obj.reservation) {
      op.owners[obj.owner].holdings.reserved_bytes -= static_cast<std::uint64_t>(less);
    }
  }
  Part& part = parts_[obj.part];
  std::lock_guard lock(part.mu);
  CountNs(part, obj, -less, 0);
  obj.meta.size = size;
  SetCopyIn(part, obj, tier, extent);
}

void ObjectIndex::ClearReservationDeadline(std::uint64_t id) {
  StoredObject* obj = Find(id);
  if (obj == nullptr) return;
  OwnerPart& op = OwnerPartOf(obj->owner);
  std::lock_guard lock(op.mu);
  if (!obj->reservation) return;
  if (obj->expiry_us != 0) Remove<&StoredObject::due_links>(op.due, *obj);
  obj->expiry_us = 0;
}

OwnerHoldings ObjectIndex::HoldingsOf(std::uint64_t owner) const {
  const OwnerPart& op = OwnerPartOf(owner);
  std::lock_guard lock(op.mu);
  return HoldingsIn(op, owner);
}

std::vector<std::uint64_t> ObjectIndex::ExpiredReservations(std::uint64_t now_us) const {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> due;
  for (const OwnerPart& op : owner_parts_) {
    std::lock_guard lock(op.mu);
    // In the order made: the first one not due ends the walk. One made by a put that lost the
    // race to the lock may be due a few microseconds before an older one that is not: the
    // next sweep finds it.
    for (const StoredObject* obj = op.due.head; obj != nullptr; obj = obj->due_links.next) {
      if (obj->expiry_us > now_us) break;
      due.emplace_back(obj->expiry_us, obj->id);
    }
  }
  std::sort(due.begin(), due.end());
  std::vector<std::uint64_t> out;
  for (const auto& [expiry, id] : due) out.push_back(id);
  return out;
}

std::vector<std::uint64_t> ObjectIndex::ReservationsOf(std::uint64_t owner) const {
  const OwnerPart& op = OwnerPartOf(owner);
  std::lock_guard lock(op.mu);
  std::vector<std::uint64_t> out;
  auto it = op.owners.find(owner);
  if (it == op.owners.end()) return out;
  for (const StoredObject* obj = it->second.reservations.head; obj != nullptr;
       obj = obj->owner_links.next) {
    out.push_back(obj->id);
  }
  return out;
}

std::uint64_t ObjectIndex::reservations() const {
  return SumOver(owner_parts_, [](const OwnerPart& op) { return op.reservations; });
}

// --- names ----------------------------------------------------------------------------------

StoredObject* ObjectIndex::Commit(StoredObject& obj, bool* unused) {
  if (obj.reservation) EraseReservation(obj.id);  // not when claimed: ClaimReservation ended it
  obj.committed = true;
  for (int t = 0; t < kTierKindCount; ++t) {
    if (obj.copies[t].present) obj.copies[t].last_use = NextUse();
  }
  StoredObject* replaced = nullptr;
  const NameView name(obj.meta.ns, obj.meta.key);
  const auto name_part = static_cast<std::uint32_t>(PartOf(name.first, name.second));
  // The object's bookkeeping is done, and its part read, before the name makes it reachable (or
  // under the same hold): once it is, a commit of the same name may replace and free it.
  const bool in_name_part = obj.part == name_part;
  if (!in_name_part) {
    Part& part = parts_[obj.part];
    std::lock_guard lock(part.mu);
    obj.linked = true;
    CountNs(part, obj, 0, 1);
    RefreshIn(part, obj);
  }
  {
    Part& part = parts_[name_part];
    std::lock_guard lock(part.mu);
    auto it = part.names.lower_bound(name);
    if (it != part.names.end() && !part.names.key_comp()(name, it->first)) {
      replaced = it->second;
      replaced->linked = false;
      it->second = &obj;
      if (unused != nullptr) {
        bool freeing = false;  // a copy already wanted gone as its readers let go
        for (const ObjectCopy& c : replaced->copies) freeing |= c.free_on_unpin;
        *unused = replaced->pins() == 0 && replaced->holds == 0 && !replaced->move && !freeing;
      }
      if (replaced->part == name_part) RefreshIn(part, *replaced);
    } else {
      part.names.emplace_hint(it, Name(name), &obj);
    }
    if (in_name_part) {
      obj.linked = true;
      // A replacement in the same part leaves its named objects as they were.
      if (replaced == nullptr || replaced->part != name_part) CountNs(part, obj, 0, 1);
      RefreshIn(part, obj);
    }
  }
  // Unlinked, the replaced object is this thread's alone (and its readers', who only let go).
  if (replaced != nullptr && (replaced->part != name_part || !in_name_part)) {
    Part& part = parts_[replaced->part];
    std::lock_guard lock(part.mu);
    CountNs(part, *replaced, 0, -1);
    if (replaced->part != name_part) RefreshIn(part, *replaced);
  }
  return replaced;
}

void ObjectIndex::Unlink(StoredObject& obj) {
  const bool was_linked = obj.linked;
  if (was_linked) {
    Part& part = parts_[PartOf(obj.meta.ns, obj.meta.key)];
    std::lock_guard lock(part.mu);
    if (auto it = part.names.find(NameView(obj.meta.ns, obj.meta.key));
        it != part.names.end() && it->second == &obj) {
      part.names.erase(it);
    }
    obj.linked = false;
  }
  Part& part = parts_[obj.part];
  std::lock_guard lock(part.mu);
  if (was_linked) CountNs(part, obj, 0, -1);
  RefreshIn(part, obj);
}

void ObjectIndex::Erase(StoredObject& obj) {
  const std::uint64_t id = obj.id;
  // Both flags are the eraser's to read: under mu_ exclusive, or the object a commit under mu_
  // shared unlinked itself (committed: not a reservation).
  if (obj.linked) Unlink(obj);
  if (obj.reservation) EraseReservation(id);
  {
    Part& part = parts_[obj.part];
    std::lock_guard lock(part.mu);
    // Clearing a copy unlists it; a copy not present is in no set.
    for (int t = 0; t < kTierKindCount; ++t) {
      if (obj.copies[t].present) ClearCopyIn(part, obj, static_cast<TierKind>(t));
    }
    CountNs(part, obj, -static_cast<std::int64_t>(obj.meta.size), 0);
    // Its counts are all given back: with the namespace's last object in the part, the entry
    // goes.
    PartNamespaceCounts& counts = *obj.ns_counts;
    --part.objects;
    ObjectCountLimits::Count(&part.unflushed, limits_.total(), -1);
    ObjectCountLimits::Count(&counts.unflushed, &counts.total->objects, -1);
    if (--counts.objects == 0) {
      limits_.Detach(obj.meta.ns, counts.total, counts.unflushed);
      part.ns_usage.erase(obj.meta.ns);
    }
    obj.ns_counts = nullptr;
  }
  std::unique_ptr<StoredObject> gone;  // destroyed with no lock held
  ObjectShard& shard = ObjectShardOf(id);
  std::lock_guard lock(shard.mu);
  auto it = shard.objects.find(id);
  gone = std::move(it->second);
  shard.objects.erase(it);
}

// --- counts ---------------------------------------------------------------------------------

void ObjectIndex::CountNs(Part& part, StoredObject& obj, std::int64_t bytes, std::int64_t objects) {
  NamespaceUsage& u = obj.ns_counts->usage;
  u.bytes += static_cast<std::uint64_t>(bytes);
  u.objects += static_cast<std::uint64_t>(objects);
  part.linked += static_cast<std::uint64_t>(objects);
}

NamespaceUsage ObjectIndex::UsageOf(const std::string& ns) const {
  NamespaceUsage total;
  for (const Part& part : parts_) {
    std::lock_guard lock(part.mu);
    auto it = part.ns_usage.find(ns);
    if (it == part.ns_usage.end()) continue;
    const NamespaceUsage& u = it->second.usage;
    total.bytes += u.bytes;
    total.objects += u.objects;
    for (int t = 0; t < kTierKindCount; ++t) total.tier_bytes[t] += u.tier_bytes[t];
  }
  return total;
}

std::uint64_t ObjectIndex::TierBytesOf(const std::string& ns, TierKind tier) const {
  return UsageOf(ns).tier_bytes[static_cast<int>(tier)];
}

std::uint64_t ObjectIndex::ObjectsExactly() const {
  return SumOver(parts_, [](const Part& part) { return part.objects; });
}

std::uint64_t ObjectIndex::ObjectsExactly(const std::string& ns) const {
  return SumOver(parts_, [&ns](const Part& part) {
    auto it = part.ns_usage.find(ns);
    return it == part.ns_usage.end() ? std::uint64_t{0} : it->second.objects;
  });
}

std::uint64_t ObjectIndex::objects() const {
  return SumOver(parts_, [](const Part& part) { return part.linked; });
}

std::uint64_t ObjectIndex::copies_in(TierKind t) const {
  return SumOver(parts_, [t](const Part& part) { return part.copies_in[static_cast<int>(t)]; });
}

// --- copies and candidate sets --------------------------------------------------------------

RecencySet& ObjectIndex::SetOf(Part& part, const StoredObject& obj, int t, int set) {
  const std::uint32_t p = partitioned_[t] ? obj.pool : kSharedPool;
  if (p >= part.sets.size()) part.sets.resize(p + 1);
  return part.sets[p][t][set];
}

RecencySet::iterator ObjectIndex::ListNewest(Part& part, RecencySet& s,
                                             std::pair<std::uint64_t, std::uint64_t> entry) {
  if (part.spare_nodes.empty()) return s.insert(s.end(), entry);
  RecencySet::node_type node = std::move(part.spare_nodes.back());
  part.spare_nodes.pop_back();
  node.value() = entry;
  return s.insert(s.end(), std::move(node));
}

void ObjectIndex::Unlist(Part& part, RecencySet& s, RecencySet::iterator at) {
  if (part.spare_nodes.size() >= kSpareNodes) {
    s.erase(at);
    return;
  }
  if (part.spare_nodes.capacity() == 0) part.spare_nodes.reserve(kSpareNodes);
  part.spare_nodes.push_back(s.extract(at));
}

void ObjectIndex::UnlistCopyIn(Part& part, StoredObject& obj, int t) {
  ObjectCopy& c = obj.copies[t];
  for (int set = 0; c.listed != 0 && set < 3; ++set) {
    if (c.listed & (1u << set)) Unlist(part, SetOf(part, obj, t, set), c.listed_at[set]);
  }
  c.listed = 0;
}

void ObjectIndex::Refresh(StoredObject& obj) {
  Part& part = parts_[obj.part];
  std::lock_guard lock(part.mu);
  RefreshIn(part, obj);
}

void ObjectIndex::RefreshIn(Part& part, StoredObject& obj) {
  // The sets each copy belongs in now; only the differences touch the sets (a put or a get
  // changes one or two memberships, not all twelve).
  const bool movable_object = MovableObject(obj);
  const int present = movable_object ? obj.present_copies() : 0;
  // Copies that keep a retained object safe alone; dropping one of them must leave another.
  int guarding = 0;
  const bool guarded = obj.meta.durability == Durability::kRetained;
  if (guarded && present > 1) {
    for (int t = 0; t < kTierKindCount; ++t) guarding += obj.copies[t].present && !needs_guard_[t];
  }
  for (int t = 0; t < kTierKindCount; ++t) {
    ObjectCopy& c = obj.copies[t];
    std::uint8_t want = 0;
    if (movable_object && c.present) {
      want |= 1u << static_cast<int>(CandidateSet::kMovable);
      if (obj.meta.durability == Durability::kCache) {
        want |= 1u << static_cast<int>(CandidateSet::kCache);
      }
      const bool last_guard = guarded && !needs_guard_[t] && guarding == 1;
      if (present > 1 && !last_guard) want |= 1u << static_cast<int>(CandidateSet::kRedundant);
    }
    if (want == c.listed) continue;
    for (int set = 0; set < 3; ++set) {
      const bool in = c.listed & (1u << set), should = want & (1u << set);
      if (in && !should) Unlist(part, SetOf(part, obj, t, set), c.listed_at[set]);
      if (!in && should) {
        // Most copies are listed as they are used, newest of all: the end is where they go,
        // and a correct hint spares the search.
        c.listed_at[set] = ListNewest(part, SetOf(part, obj, t, set), {c.last_use.load(), obj.id});
      }
    }
    c.listed = want;
  }
}

void ObjectIndex::Touch(StoredObject& obj, TierKind tier) {
  Part& part = parts_[obj.part];
  std::lock_guard lock(part.mu);
  ObjectCopy& c = obj.copy(tier);
  const std::uint64_t use = NextUse();
  c.last_use = use;
  // Re-key the copy's entries under its new recency (no allocation: the nodes move).
  for (int set = 0; set < 3; ++set) {
    if (!(c.listed & (1u << set))) continue;
    auto& s = SetOf(part, obj, static_cast<int>(tier), set);
    auto node = s.extract(c.listed_at[set]);
    node.value() = {use, obj.id};
    c.listed_at[set] = s.insert(s.end(), std::move(node));  // the newest: the end, no search
  }
}

RecencySet::iterator ObjectIndex::Rekey(StoredObject& obj, int t, int set, RecencySet& s,
                                        RecencySet::iterator here, RecencySet::iterator hint) {
  // No allocation: the node moves.
  auto node = s.extract(here);
  node.value() = {UseOf(obj, t), obj.id};
  obj.copies[t].listed_at[set] = s.insert(hint, std::move(node));
  return obj.copies[t].listed_at[set];
}

void ObjectIndex::SetCopy(StoredObject& obj, TierKind tier, const Extent& extent) {
  Part& part = parts_[obj.part];
  std::lock_guard lock(part.mu);
  SetCopyIn(part, obj, tier, extent);
}

void ObjectIndex::SetCopyIn(Part& part, StoredObject& obj, TierKind tier, const Extent& extent) {
  ObjectCopy& c = obj.copy(tier);
  UnlistCopyIn(part, obj, static_cast<int>(tier));  // its key changes; Refresh fixes the rest
  if (!c.present) ++part.copies_in[static_cast<int>(tier)];
  std::uint64_t& bytes = obj.ns_counts->usage.tier_bytes[static_cast<int>(tier)];
  if (c.present) bytes -= c.extent.length;
  bytes += extent.length;
  c.present = true;
  c.extent = extent;
  // A reservation's copies are in no candidate set: their use starts as it commits (one clock
  // read less per put).
  if (obj.committed) c.last_use = NextUse();
  RefreshIn(part, obj);
}

void ObjectIndex::RelocateCopy(StoredObject& obj, TierKind tier, const Extent& extent) {
  Part& part = parts_[obj.part];
  std::lock_guard lock(part.mu);
  ObjectCopy& c = obj.copy(tier);
  std::uint64_t& bytes = obj.ns_counts->usage.tier_bytes[static_cast<int>(tier)];
  bytes = bytes - c.extent.length + extent.length;
  c.extent = extent;
}

void ObjectIndex::ClearCopy(StoredObject& obj, TierKind tier) {
  Part& part = parts_[obj.part];
  std::lock_guard lock(part.mu);
  ClearCopyIn(part, obj, tier);
}

void ObjectIndex::ClearCopyIn(Part& part, StoredObject& obj, TierKind tier) {
  ObjectCopy& c = obj.copy(tier);
  UnlistCopyIn(part, obj, static_cast<int>(tier));
  if (c.present) {
    --part.copies_in[static_cast<int>(tier)];
    obj.ns_counts->usage.tier_bytes[static_cast<int>(tier)] -= c.extent.length;
  }
  c.present = false;
  c.extent = {};
  RefreshIn(part, obj);
}

}  // namespace tierpool
