// StoreService's gets: a batch's items pinned (the shared path first, for all it can take at
// once), their bytes carried in the frame or their extents handed out, and what a batch carried on
// on a worker had done ahead taken back. The class and its locking: store/service.h.
#include "common/logging.h"
#include "common/no_wait_scope.h"
#include "store/packed_items.h"
#include "store/service.h"
#include "store/service_wire.h"
#include "transport/wire_meta.h"

namespace tierpool {

using transport::ToWire;

void StoreService::HandleGet(std::uint64_t session, const transport::PeerCredentials& peer,
                             const wire::GetRequest& req, const GetKeys& keys,
                             wire::GetReply* reply) {
  std::uint64_t inline_budget = config_.max_frame_bytes - 64 * 1024;  // room for metadata
  // AUTO puts at most the inline threshold's worth of bytes in one reply: a batch of many small
  // objects comes back pinned, read from the mapping, which is 2x faster than carrying 64 x 4 KiB
  // through the socket (docs/benchmarks/redis.md, "The local path beside Redis").
  std::uint64_t auto_inline_left = config_.inline_threshold_bytes;
  // Items answered by a pin go in reply->packed when the client reads them there (only size,
  // checksum, lease and extent), the rest in reply->items with their positions listed.
  const bool packed = req.packed_results() && req.bytes_meta_only() && !req.device_ok() &&
                      (req.mode() == wire::AUTO || req.mode() == wire::PINNED);
  wire::PackedGetResults* pins = packed ? reply->mutable_packed() : nullptr;
  // Carried on on a worker after a refused wait (no_wait_scope.h): the items answered on the
  // I/O thread stay, and their bytes count against this reply's budgets as they did there.
  const int answered = reply->items_size() + (packed ? pins->sizes_size() : 0);
  for (int j = 0; j < reply->items_size(); ++j) {  // packed items carry no bytes
    const auto& done = reply->items(j);
    if (!done.has_data()) continue;
    inline_budget -= done.data().size();
    const int i = packed ? static_cast<int>(pins->positions(j)) : j;  // its key
    if (req.mode() == wire::AUTO && MapsNamespace(peer, std::string(keys.ns(i)))) {
      auto_inline_left -= std::min<std::uint64_t>(auto_inline_left, done.data().size());
    }
  }
  std::string ns, key;  // the item's names: one buffer each for the whole batch
  // The items the shared path can pin are pinned first, all at once (ObjectStore::PinAllShared:
  // one shared lock, one pin-limit check, one lease-table lock); Pin takes the rest in turn.
  // What was done ahead for items not answered (the batch carried on on a worker after a
  // refused wait) is taken back: their pins let go, their lookups not counted.
  // The same for every item of the batch.
  const bool known_tier = !req.has_want_tier() || wire::Tier_IsValid(req.want_tier());
  PinOptions options;
  if (req.has_want_tier() && known_tier) options.want = static_cast<TierKind>(req.want_tier());
  // Only a view can be of device memory: copies are made from host memory.
  options.device_ok = req.device_ok() && req.mode() == wire::PINNED;
  options.bytes_meta_only = req.bytes_meta_only();
  std::vector<std::optional<Result<PinnedObject>>> ahead;
  std::vector<int> ahead_at;  // item i's entry in ahead, or -1
  if ((req.mode() == wire::AUTO || req.mode() == wire::PINNED) && known_tier) {
    PinAhead(session, peer, keys, answered, options, &ahead, &ahead_at);
  }
  auto release_ahead = [&] { ReleaseAhead(session, ahead); };
  for (int i = answered; i < keys.size(); ++i) {
    ns.assign(keys.ns(i));
    key.assign(keys.key(i));
    auto* out = reply->add_items();
    if (packed) pins->add_positions(static_cast<std::uint32_t>(i));  // taken back if packed
    if (req.mode() == wire::META) {
      auto meta = store_->Head(ns, key);
      if (!meta.ok()) {
        ToWire(meta.status(), out->mutable_status());
      } else {
        ToWire(*meta, out->mutable_meta());
      }
      continue;
    }
    if (!known_tier) {
      ToWire(Status::InvalidArgument("unknown tier"), out->mutable_status());
      continue;
    }
    // A connection that does not map the object's memory gets its bytes in the frame or not
    // at all: never an extent it could only guess at.
    const bool mapped = req.mode() == wire::INLINE || MapsNamespace(peer, ns);
    if (!mapped && req.mode() == wire::PINNED) {
      ToWire(NotMapped(ns), out->mutable_status());
      continue;
    }
    const int at = ahead_at.empty() ? -1 : ahead_at[static_cast<std::size_t>(i)];
    auto* made = at >= 0 && ahead[static_cast<std::size_t>(at)]
                     ? &ahead[static_cast<std::size_t>(at)]
                     : nullptr;
    Result<PinnedObject> pinned =
        made != nullptr ? std::move(**made) : store_->Pin(ns, key, session, options);
    if (made != nullptr) made->reset();
    if (WaitRefused()) {  // carried on from this key on a worker
      reply->mutable_items()->RemoveLast();
      if (packed) pins->mutable_positions()->RemoveLast();
      release_ahead();
      return;
    }
    if (!pinned.ok()) {
      ToWire(pinned.status(), out->mutable_status());
      continue;
    }
    std::uint64_t size = pinned->meta.size;
    bool inline_it = req.mode() == wire::INLINE || !mapped ||
                     (req.mode() == wire::AUTO && size <= auto_inline_left);
    if (inline_it && mapped && req.mode() == wire::AUTO) auto_inline_left -= size;
    if (inline_it && size > inline_budget) {
      Status s = store_->Release(pinned->lease_id, session);
      (void)s;
      ToWire(Status::ResourceExhausted("object of " + std::to_string(size) +
                                       " bytes does not fit the rest of this reply frame; get it "
                                       "pinned or in a smaller batch"),
             out->mutable_status());
      continue;
    }
    if (packed && !inline_it) {
      reply->mutable_items()->RemoveLast();
      pins->mutable_positions()->RemoveLast();
      pins->add_sizes(size);
      pins->add_checksums(pinned->meta.checksum);
      pins->add_lease_ids(pinned->lease_id);
      pins->add_arena_ids(pinned->extent.arena_id);
      pins->add_offsets(pinned->extent.offset);
      pins->add_lengths(pinned->extent.length);
      continue;
    }
    ToWire(pinned->meta, out->mutable_meta());
    if (inline_it) {
      inline_budget -= size;
      // Copied and checked in one pass: damage is an error, never data.
      Status copied = store_->CopyOut(*pinned, out->mutable_data());
      Status s = store_->Release(pinned->lease_id, session);
      if (!s.ok()) spdlog::error("release after inline get: {}", s.ToString());
      if (!copied.ok()) {
        out->clear_meta();
        out->clear_data();
        ToWire(copied, out->mutable_status());
        continue;
      }
      out->set_has_data(true);
    } else {
      out->set_lease_id(pinned->lease_id);
      ToWire(pinned->extent, out->mutable_extent());
    }
  }
  release_ahead();  // none are left but by a path above that answers an item without its pin
}

void StoreService::PinAhead(std::uint64_t session, const transport::PeerCredentials& peer,
                            const GetKeys& keys, int answered, const PinOptions& options,
                            std::vector<std::optional<Result<PinnedObject>>>* ahead,
                            std::vector<int>* ahead_at) {
  std::vector<ObjectIndex::NameView> names;
  names.reserve(static_cast<std::size_t>(keys.size() - answered));
  ahead_at->assign(static_cast<std::size_t>(keys.size()), -1);
  std::optional<std::pair<std::string_view, bool>> last_ns;  // a namespace and whether mapped
  for (int i = answered; i < keys.size(); ++i) {
    if (!last_ns || last_ns->first != keys.ns(i)) {
      last_ns.emplace(keys.ns(i), MapsNamespace(peer, std::string(keys.ns(i))));
    }
    if (!last_ns->second) continue;  // copied through the frame, or refused: in the loop
    (*ahead_at)[static_cast<std::size_t>(i)] = static_cast<int>(names.size());
    names.emplace_back(keys.ns(i), keys.key(i));
  }
  store_->PinAllShared(names, session, options, ahead);
}

void StoreService::ReleaseAhead(std::uint64_t session,
                                const std::vector<std::optional<Result<PinnedObject>>>& ahead) {
  std::vector<std::uint64_t> leases;
  std::uint64_t misses = 0;
  for (const auto& a : ahead) {
    if (a && a->ok()) leases.push_back((*a)->lease_id);
    if (a && a->status().code() == StatusCode::kNotFound) ++misses;
  }
  if (!leases.empty() || misses > 0) (void)store_->ReleaseUnused(leases, misses, session);
}

}  // namespace tierpool
