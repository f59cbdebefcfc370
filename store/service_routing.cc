// Where StoreService runs a request: on the transport's I/O thread, or on a worker when it may
// wait (a removal the persist journal must make durable, a promote, a plan's registration, a
// large commit to verify, a put that must wait for room). The class and its locking:
// store/service.h.
#include "store/service.h"

namespace tierpool {

bool StoreService::MayRemoveWatched(const wire::Request& req) {
  if (journal_ == nullptr || !journal_->watching()) return false;
  switch (req.body_case()) {
    case wire::Request::kDel:
      for (const auto& k : req.del().keys()) {
        if (journal_->Watched(k.ns(), k.key())) return true;
      }
      return false;
    case wire::Request::kPutInline:
      for (const auto& item : req.put_inline().items()) {
        if (journal_->Watched(item.spec().ns(), item.spec().key())) return true;
      }
      return false;
    case wire::Request::kCommit: {
      std::vector<std::uint64_t> ids;
      for (const auto& item : req.commit().items()) {
        if (item.has_spec() && journal_->Watched(item.spec().ns(), item.spec().key())) return true;
        ids.push_back(item.reservation_id());
      }
      for (const auto& [ns, key] : store_->NamesOfReservations(ids)) {
        if (journal_->Watched(ns, key)) return true;
      }
      return false;
    }
    default:
      return false;
  }
}

bool StoreService::MayBlock(std::uint64_t session, const wire::Request& req) {
  (void)session;
  if (MayRemoveWatched(req)) return true;
  switch (req.body_case()) {
    case wire::Request::kPromote:
    case wire::Request::kRegisterPlan:  // parses and checks a plan: proportional to its size
      return true;
    case wire::Request::kCommit: {
      // Verifying a commit reads the object once: large ones are read on a worker.
      if (!store_->config().verify_commits) return false;
      std::vector<std::uint64_t> ids;
      for (const auto& item : req.commit().items()) ids.push_back(item.reservation_id());
      return store_->ReservedBytes(ids) > (1u << 20);
    }
    // No probe for gets: a pin that must wait (an object only on nvme, one moving, one wanted
    // in another tier) refuses on the I/O thread before pinning anything, and a worker carries
    // the batch on from that item. A probe looked every key up twice (docs/benchmarks/redis.md,
    // "Get batches: no probe, releases and pins per batch").
    case wire::Request::kReserve:
    case wire::Request::kPutInline: {
      std::uint64_t total = 0, largest = 0;
      bool hbm = false;
      std::string ns;
      // A put of `size` bytes as `spec` says (a packed item's size is not in its spec).
      auto add = [&](const wire::PutSpec& spec, std::uint64_t size) {
        total += size;
        largest = std::max<std::uint64_t>(largest, size);
        hbm = hbm || (spec.has_tier_hint() && spec.tier_hint() == wire::HBM);
        if (ns.empty()) ns = spec.ns();
      };
      if (req.has_reserve()) {
        for (const auto& item : req.reserve().items()) add(item, item.size());
        const wire::PackedPutSpecs& packed = req.reserve().packed();
        for (std::uint64_t size : packed.sizes()) add(packed.spec(), size);
      } else {
        for (const auto& item : req.put_inline().items()) add(item.spec(), item.spec().size());
      }
      return store_->ReserveMayWait(ns, total, largest, hbm);
    }
    default:
      return false;
  }
}

}  // namespace tierpool
