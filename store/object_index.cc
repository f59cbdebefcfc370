#include "store/object_index.h"

#include <limits>

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

StoredObject* ObjectIndex::Find(std::uint64_t id) {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : it->second.get();
}

StoredObject* ObjectIndex::Lookup(const std::string& ns, const std::string& key) {
  auto it = names_.find(NameView(ns, key));
  return it == names_.end() ? nullptr : objects_.at(it->second).get();
}

bool ObjectIndex::IsReservation(std::uint64_t id) const {
  auto it = objects_.find(id);
  return it != objects_.end() && it->second->reservation;
}

StoredObject& ObjectIndex::AddReservation(ObjectMeta meta, std::uint64_t owner,
                                          std::uint64_t expiry_us) {
  auto obj = std::make_unique<StoredObject>();
  obj->id = NextId();
  obj->meta = std::move(meta);
  obj->owner = owner;
  obj->expiry_us = expiry_us;
  StoredObject& ref = *obj;
  ref.reservation = true;
  ++reservations_;
  if (expiry_us != 0) reservations_by_expiry_.emplace(expiry_us, ref.id);
  reservations_by_owner_.emplace(owner, ref.id);
  Count(owner, 1, static_cast<std::int64_t>(ref.meta.size));
  CountNs(ref.meta.ns, static_cast<std::int64_t>(ref.meta.size), 0);
  objects_.emplace(ref.id, std::move(obj));
  return ref;
}

void ObjectIndex::EraseReservation(std::uint64_t id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second->reservation) return;
  StoredObject& obj = *it->second;
  obj.reservation = false;
  --reservations_;
  reservations_by_expiry_.erase({obj.expiry_us, id});
  reservations_by_owner_.erase({obj.owner, id});
  Count(obj.owner, -1, -static_cast<std::int64_t>(obj.meta.size));
}

void ObjectIndex::ShrinkReservation(StoredObject& obj, std::uint64_t size, TierKind tier,
                                    const Extent& extent) {
  const auto less = static_cast<std::int64_t>(obj.meta.size - size);
  Count(obj.owner, 0, -less);
  CountNs(obj.meta.ns, -less, 0);
  obj.meta.size = size;
  SetCopy(obj, tier, extent);
}

void ObjectIndex::ClearReservationDeadline(std::uint64_t id) {
  auto it = objects_.find(id);
  if (it == objects_.end() || !it->second->reservation) return;
  reservations_by_expiry_.erase({it->second->expiry_us, id});
  it->second->expiry_us = 0;
}

void ObjectIndex::Count(std::uint64_t owner, std::int64_t reservations, std::int64_t bytes) {
  OwnerHoldings& h = holdings_[owner];
  h.reservations += static_cast<std::uint64_t>(reservations);
  h.reserved_bytes += static_cast<std::uint64_t>(bytes);
  if (h.reservations == 0) holdings_.erase(owner);
}

void ObjectIndex::CountNs(const std::string& ns, std::int64_t bytes, std::int64_t objects) {
  NamespaceUsage& u = ns_usage_[ns];
  u.bytes += static_cast<std::uint64_t>(bytes);
  u.objects += static_cast<std::uint64_t>(objects);
  if (u.bytes == 0 && u.objects == 0) ns_usage_.erase(ns);
}

NamespaceUsage ObjectIndex::UsageOf(const std::string& ns) const {
  auto it = ns_usage_.find(ns);
  return it == ns_usage_.end() ? NamespaceUsage{} : it->second;
}

OwnerHoldings ObjectIndex::HoldingsOf(std::uint64_t owner) const {
  auto it = holdings_.find(owner);
  return it == holdings_.end() ? OwnerHoldings{} : it->second;
}

StoredObject* ObjectIndex::Commit(StoredObject& obj) {
  EraseReservation(obj.id);
  obj.committed = true;
  StoredObject* replaced = nullptr;
  const NameView name(obj.meta.ns, obj.meta.key);
  auto it = names_.lower_bound(name);
  if (it != names_.end() && !names_.key_comp()(name, it->first)) {
    replaced = objects_.at(it->second).get();
    replaced->linked = false;
    Refresh(*replaced);
    it->second = obj.id;
  } else {
    names_.emplace_hint(it, Name(name), obj.id);
    CountNs(obj.meta.ns, 0, 1);
  }
  obj.linked = true;
  for (int t = 0; t < kTierKindCount; ++t) {
    if (obj.copies[t].present) obj.copies[t].last_use = NextUse();
  }
  Refresh(obj);
  return replaced;
}

void ObjectIndex::EraseName(const StoredObject& obj) {
  if (auto it = names_.find(NameView(obj.meta.ns, obj.meta.key)); it != names_.end()) {
    names_.erase(it);
  }
}

void ObjectIndex::Unlink(StoredObject& obj) {
  if (obj.linked) {
    EraseName(obj);
    obj.linked = false;
    CountNs(obj.meta.ns, 0, -1);
  }
  Refresh(obj);
}

void ObjectIndex::Erase(std::uint64_t id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  StoredObject& obj = *it->second;
  EraseReservation(id);
  Unlist(obj);
  if (obj.linked) {
    EraseName(obj);
    CountNs(obj.meta.ns, 0, -1);
  }
  CountNs(obj.meta.ns, -static_cast<std::int64_t>(obj.meta.size), 0);
  for (int t = 0; t < kTierKindCount; ++t) {
    if (obj.copies[t].present) ClearCopy(obj, static_cast<TierKind>(t));
  }
  objects_.erase(it);
}

RecencySet& ObjectIndex::SetOf(const StoredObject& obj, int t, int set) {
  const std::uint32_t p = partitioned_[t] ? obj.pool : kSharedPool;
  if (p >= sets_.size()) sets_.resize(p + 1);
  return sets_[p][t][set];
}

void ObjectIndex::UnlistCopy(StoredObject& obj, int t) {
  ObjectCopy& c = obj.copies[t];
  for (int set = 0; c.listed != 0 && set < 3; ++set) {
    if (c.listed & (1u << set)) SetOf(obj, t, set).erase(c.listed_at[set]);
  }
  c.listed = 0;
}

void ObjectIndex::Unlist(StoredObject& obj) {
  for (int t = 0; t < kTierKindCount; ++t) UnlistCopy(obj, t);
}

void ObjectIndex::Refresh(StoredObject& obj) {
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
      if (in && !should) SetOf(obj, t, set).erase(c.listed_at[set]);
      if (!in && should) {
        // Most copies are listed as they are used, newest of all: the end is where they go,
        // and a correct hint spares the search.
        RecencySet& listed = SetOf(obj, t, set);
        c.listed_at[set] = listed.insert(listed.end(), {c.last_use.load(), obj.id});
      }
    }
    c.listed = want;
  }
}

void ObjectIndex::Touch(StoredObject& obj, TierKind tier) {
  ObjectCopy& c = obj.copy(tier);
  const std::uint64_t use = NextUse();
  c.last_use = use;
  // Re-key the copy's entries under its new recency (no allocation: the nodes move).
  for (int set = 0; set < 3; ++set) {
    if (!(c.listed & (1u << set))) continue;
    auto& s = SetOf(obj, static_cast<int>(tier), set);
    auto node = s.extract(c.listed_at[set]);
    node.value() = {use, obj.id};
    c.listed_at[set] = s.insert(s.end(), std::move(node));  // the newest: the end, no search
  }
}

bool ObjectIndex::Rekeyed(StoredObject& obj, int t, int set, RecencySet& s,
                          RecencySet::iterator here, RecencySet::iterator next) {
  ObjectCopy& c = obj.copies[t];
  const std::uint64_t use = c.last_use.load(std::memory_order_relaxed);
  if (here->first >= use) return false;
  // Used since it was listed: its place is later in the order (no allocation: the node moves).
  auto node = s.extract(here);
  node.value() = {use, obj.id};
  c.listed_at[set] = s.insert(next, std::move(node));
  return next != s.end() && *next < *c.listed_at[set];
}

void ObjectIndex::SetCopy(StoredObject& obj, TierKind tier, const Extent& extent) {
  ObjectCopy& c = obj.copy(tier);
  UnlistCopy(obj, static_cast<int>(tier));  // its key changes; Refresh fixes the rest
  if (!c.present) ++copies_in_[static_cast<int>(tier)];
  std::uint64_t& bytes = ns_tier_bytes_[obj.meta.ns][static_cast<int>(tier)];
  if (c.present) bytes -= c.extent.length;
  bytes += extent.length;
  c.present = true;
  c.extent = extent;
  c.last_use = NextUse();
  Refresh(obj);
}

void ObjectIndex::RelocateCopy(StoredObject& obj, TierKind tier, const Extent& extent) {
  ObjectCopy& c = obj.copy(tier);
  std::uint64_t& bytes = ns_tier_bytes_[obj.meta.ns][static_cast<int>(tier)];
  bytes = bytes - c.extent.length + extent.length;
  c.extent = extent;
}

void ObjectIndex::ClearCopy(StoredObject& obj, TierKind tier) {
  ObjectCopy& c = obj.copy(tier);
  UnlistCopy(obj, static_cast<int>(tier));
  if (c.present) {
    --copies_in_[static_cast<int>(tier)];
    // An entry goes once all its bytes are gone (a copy of an empty object may outlive it).
    if (auto it = ns_tier_bytes_.find(obj.meta.ns); it != ns_tier_bytes_.end()) {
      it->second[static_cast<int>(tier)] -= c.extent.length;
      bool empty = true;
      for (std::uint64_t b : it->second) empty = empty && b == 0;
      if (empty) ns_tier_bytes_.erase(it);
    }
  }
  c.present = false;
  c.extent = {};
  Refresh(obj);
}

std::uint64_t ObjectIndex::TierBytesOf(const std::string& ns, TierKind tier) const {
  auto it = ns_tier_bytes_.find(ns);
  return it == ns_tier_bytes_.end() ? 0 : it->second[static_cast<int>(tier)];
}

namespace {
std::vector<std::uint64_t> UpTo(const std::set<std::pair<std::uint64_t, std::uint64_t>>& set,
                                std::uint64_t now_us) {
  std::vector<std::uint64_t> out;
  for (const auto& [expiry, id] : set) {
    if (expiry > now_us) break;
    out.push_back(id);
  }
  return out;
}
std::vector<std::uint64_t> Of(const std::set<std::pair<std::uint64_t, std::uint64_t>>& set,
                              std::uint64_t owner) {
  std::vector<std::uint64_t> out;
  for (auto it = set.lower_bound({owner, 0}); it != set.end() && it->first == owner; ++it) {
    out.push_back(it->second);
  }
  return out;
}
}  // namespace

std::vector<std::uint64_t> ObjectIndex::ExpiredReservations(std::uint64_t now_us) const {
  return UpTo(reservations_by_expiry_, now_us);
}
std::vector<std::uint64_t> ObjectIndex::ReservationsOf(std::uint64_t owner) const {
  return Of(reservations_by_owner_, owner);
}

}  // namespace tierpool
