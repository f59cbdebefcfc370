// What the executor asks of the store, declared here and implemented in store/ (so the
// dependency still points down: store uses prefetch, never the reverse).
//
// Thread safety: every method may be called from any thread. None blocks on I/O: moves are
// started and report through their callbacks, which run on the store's mover threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace tierpool::prefetch {

struct TensorPlacement {
  bool exists = false;
  bool in_hbm = false;          // a copy in hbm
  bool moving_to_hbm = false;   // a copy on its way into hbm
  bool has_lower_copy = false;  // a copy below hbm (dropping the hbm copy costs no transfer)
  std::uint64_t size = 0;
  bool leaving_hbm = false;        // the hbm copy goes as its readers let go (a FREE met their pin)
  bool moving_out_of_hbm = false;  // being copied down, its hbm copy freed as it lands
};

class TierControl {
 public:
  virtual ~TierControl() = default;
  using Done = std::function<void(Status)>;

  virtual TensorPlacement Placement(const std::string& ns, const std::string& key) = 0;
  // Bytes of the namespace's objects in hbm, including room held by moves into hbm.
  virtual std::uint64_t HbmBytes(const std::string& ns) = 0;
  // The most HbmBytes has been since the last ResetHbmPeak (a planned namespace's every
  // allocation in hbm counted), and the start of a new such span.
  virtual std::uint64_t HbmPeak(const std::string& ns) = 0;
  virtual void ResetHbmPeak(const std::string& ns) = 0;
  // Starts a copy into hbm at planned priority, ordered by deadline_us (the Clock's time).
  // OK: started; done runs when it lands or fails, never before this returns (the executor
  // calls with its lock held). ALREADY_EXISTS: it happened at once with no transfer; done never
  // runs. Other errors (NOT_FOUND, RESOURCE_EXHAUSTED): nothing happened; done never runs.
  virtual Status Prefetch(const std::string& ns, const std::string& key, std::uint64_t deadline_us,
                          Done done) = 0;
  // Copies the hbm copy down (unless a lower copy exists) and frees it, once its readers let go
  // where it is pinned. Results as Prefetch's. A Prefetch of a copy leaving so keeps it.
  virtual Status Offload(const std::string& ns, const std::string& key, Done done) = 0;
  // Frees the hbm copy (as its readers let go, where it is pinned); FAILED_PRECONDITION when it
  // is the only copy.
  virtual Status Drop(const std::string& ns, const std::string& key) = 0;
  virtual const Clock* clock() const = 0;
};

}  // namespace tierpool::prefetch
