#include "benchmarks/live_replay.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "common/checksum.h"
#ifdef TIERPOOL_HAVE_CUDA
#include "benchmarks/device_fill.h"
#endif

namespace tierpool::live {

using prefetch::Lifetimes;
using prefetch::Policy;
using prefetch::Schedule;
using prefetch::TimelineEvent;
using Steady = std::chrono::steady_clock;

namespace {

double Us(Steady::time_point a, Steady::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Waits until `t`: sleeps most of the way, then spins (a sleep overshoots by tens of us).
void WaitUntil(Steady::time_point t) {
  constexpr auto kSpin = std::chrono::microseconds(150);
  auto now = Steady::now();
  if (t - now > kSpin) std::this_thread::sleep_for(t - now - kSpin);
  while (Steady::now() < t) {
  }
}

// Bytes of one tensor version: 64-bit words seeded by (tensor, version).
std::uint64_t Seed(std::uint32_t t, std::uint64_t version) {
  return (static_cast<std::uint64_t>(t) << 32) ^ (version * 0x9E3779B97F4A7C15ull);
}
// Byte `off` of a version: the little-endian bytes of 64-bit words seeded by it.
std::byte Expected(std::uint64_t seed, std::size_t off) {
  const std::uint64_t w = seed ^ ((off / 8) * 0xff51afd7ed558ccdull);
  return static_cast<std::byte>((w >> (8 * (off % 8))) & 0xff);
}
void Fill(std::byte* p, std::size_t n, std::uint64_t seed, bool all) {
  if (all) {
    std::size_t off = 0;
    for (; off + 8 <= n; off += 8) {
      const std::uint64_t w = seed ^ ((off / 8) * 0xff51afd7ed558ccdull);
      std::memcpy(p + off, &w, 8);  // little-endian: the same bytes as Expected
    }
    for (; off < n; ++off) p[off] = Expected(seed, off);
    return;
  }
  // A stamp at each end; the middle keeps whatever the extent held.
  for (std::size_t off = 0; off < std::min<std::size_t>(n, 64); ++off) p[off] = Expected(seed, off);
  for (std::size_t off = n > 64 ? n - 64 : 0; off < n; ++off) p[off] = Expected(seed, off);
}
// The stamps of a tensor in device memory, read back (always false without CUDA).
bool CheckOnDevice(const void* p, std::size_t n, std::uint64_t seed, int device) {
#ifdef TIERPOOL_HAVE_CUDA
  std::byte head[64], tail[64];
  if (!ReadStamps(p, n, head, tail, device)) return false;
  const std::size_t k = std::min<std::size_t>(n, 64);
  for (std::size_t off = 0; off < k; ++off) {
    if (head[off] != Expected(seed, off) || tail[off] != Expected(seed, n - k + off)) return false;
  }
  return true;
#else
  (void)p, (void)n, (void)seed, (void)device;
  return false;
#endif
}
bool Check(const std::byte* p, std::size_t n, std::uint64_t seed) {
  for (std::size_t off = 0; off < std::min<std::size_t>(n, 64); ++off) {
    if (p[off] != Expected(seed, off)) return false;
  }
  for (std::size_t off = n > 64 ? n - 64 : 0; off < n; ++off) {
    if (p[off] != Expected(seed, off)) return false;
  }
  return true;
}

std::uint64_t LinkBytes(const ServerStats& s, const char* name) { return s.counter(name); }

}  // namespace

Result<LinkCalibration> CalibrateLinks(Client& client, std::uint64_t bytes) {
  std::vector<std::byte> data(bytes);
  Fill(data.data(), data.size(), 7, true);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto time_up = [&](const std::string& key, std::size_t size) -> Result<std::vector<double>> {
    PutOptions in_dram;
    in_dram.tier = TierKind::kDram;
    TIERPOOL_RETURN_IF_ERROR(client.Put(key, data.data(), size, in_dram));
    std::vector<double> up;
    for (int i = 0; i < 5; ++i) {
      auto t0 = Steady::now();
      TIERPOOL_RETURN_IF_ERROR(client.Promote(key, TierKind::kHbm));
      up.push_back(Us(t0, Steady::now()));
      TIERPOOL_RETURN_IF_ERROR(client.Promote(key, TierKind::kDram));  // drops the clean copy
    }
    TIERPOOL_RETURN_IF_ERROR(client.Delete(key));
    return up;
  };
  auto time_down = [&](const std::string& key, std::size_t size) -> Result<std::vector<double>> {
    std::vector<double> down;
    PutOptions in_hbm;
    in_hbm.tier = TierKind::kHbm;
    for (int i = 0; i < 5; ++i) {
      TIERPOOL_RETURN_IF_ERROR(client.Put(key, data.data(), size, in_hbm));
      // A device hbm (--hbm-device) takes the put in dram and copies it up as it commits: wait
      // for that copy, after which hbm holds the only one.
      TIERPOOL_RETURN_IF_ERROR(client.Promote(key, TierKind::kHbm));
      auto meta = client.Stat(key);
      if (!meta.ok()) return meta.status();
      if (meta->tier != TierKind::kHbm) {
        return Status::FailedPrecondition("calibration: hbm has no room for " +
                                          std::to_string(size) + " bytes");
      }
      auto t0 = Steady::now();
      TIERPOOL_RETURN_IF_ERROR(client.Promote(key, TierKind::kDram));  // the only copy moves
      down.push_back(Us(t0, Steady::now()));
    }
    TIERPOOL_RETURN_IF_ERROR(client.Delete(key));
    return down;
  };
  auto small_up = time_up("tierpool-calibrate-small", 4096);
  if (!small_up.ok()) return small_up.status();
  auto big_up = time_up("tierpool-calibrate", bytes);
  if (!big_up.ok()) return big_up.status();
  auto big_down = time_down("tierpool-calibrate", bytes);
  if (!big_down.ok()) return big_down.status();
  LinkCalibration c;
  // A small move's time is the fixed cost, to take off a big one's. On a busy host the small
  // one can wait a scheduler tick and come out longer than the big one (4,563 GB/s once, on a
  // 2-vCPU VM): no more than half the big move is taken off, so the rate is at most twice the
  // plain one.
  const double big = std::min(median(*big_up), median(*big_down));
  c.latency_us = std::min(median(*small_up), 0.5 * big);
  c.h2d_gbps = static_cast<double>(bytes) / std::max(1.0, median(*big_up) - c.latency_us) / 1e3;
  c.d2h_gbps = static_cast<double>(bytes) / std::max(1.0, median(*big_down) - c.latency_us) / 1e3;
  return c;
}

Result<LiveReport> RunLive(Client& client, const Schedule& s, const Lifetimes& lt,
                           const LiveOptions& o) {
  const std::uint32_t n = static_cast<std::uint32_t>(s.tensors_size());
  const std::uint32_t steps = lt.steps();
  LiveReport out;
  auto& r = out.r;
  r.policy = prefetch::PolicyName(o.policy);
  r.budget = o.policy == Policy::kNone ? 0 : o.budget;
  std::vector<std::uint64_t> version(n, 0), written_sum(n, 0);
  // Keyed by tensor id: names are for people (an ONNX import may give two tensors one name).
  auto key = [&](std::uint32_t t) { return "t" + std::to_string(t); };
  auto size = [&](std::uint32_t t) { return s.tensors(static_cast<int>(t)).size_bytes(); };
  auto kind = [&](std::uint32_t t) {
    switch (s.tensors(static_cast<int>(t)).kind()) {
      case tierpool::schedule::WEIGHT:
        return ObjectKind::kWeight;
      case tierpool::schedule::OPTIMIZER_STATE:
        return ObjectKind::kOptimizerState;
      case tierpool::schedule::KV_CACHE:
        return ObjectKind::kKvBlock;
      default:
        return ObjectKind::kActivation;
    }
  };
  // Time the current step's writes waited for room (the policy making it: moving copies down,
  // or the executor's copy-outs in flight), which is no host byte work.
  double room_wait_in_step = 0;
  // Writes version `v` of tensor t into `tier`.
  auto write = [&](std::uint32_t t, TierKind tier) -> Status {
    PutOptions po;
    po.tier = tier;
    po.kind = kind(t);
    po.device = o.device && tier == TierKind::kHbm;
    const auto asked = Steady::now();
    auto w = client.Reserve(key(t), size(t), po);
    room_wait_in_step += Us(asked, Steady::now());
    if (!w.ok()) return w.status();
    const std::uint64_t seed = Seed(t, ++version[t]);
    if (w->device_data() != nullptr) {
#ifdef TIERPOOL_HAVE_CUDA
      if (!FillOnDevice(w->device_data(), w->size(), seed, w->device())) {
        return Status::IoError("filling " + key(t) + " on the device");
      }
#endif
      written_sum[t] = 0;  // the commit hashes it on the GPU; views are checked against that
      return w->Commit();
    }
    if (size(t) > 0) Fill(w->data(), w->size(), seed, o.verify_all);
    if (o.verify_all) written_sum[t] = Xxh3(w->data(), w->size());
    return w->Commit();
  };

  // Clean slate, then the tensors that exist before the first step.
  for (std::uint32_t t = 0; t < n; ++t) (void)client.Delete(key(t));
  std::set<std::uint32_t> start_in_hbm;
  if (o.policy == Policy::kNone) {
    for (std::uint32_t t = 0; t < n; ++t) {
      if (lt.persistent(t)) start_in_hbm.insert(t);
    }
  } else if (o.policy == Policy::kPlanned && o.plan != nullptr) {
    start_in_hbm.insert(o.plan->resident_at_start().begin(), o.plan->resident_at_start().end());
  }
  for (std::uint32_t t = 0; t < n; ++t) {
    if (!lt.persistent(t)) continue;
    TIERPOOL_RETURN_IF_ERROR(write(t, start_in_hbm.count(t) ? TierKind::kHbm : TierKind::kDram));
  }
  std::optional<PlanHandle> plan;
  if (o.policy == Policy::kPlanned) {
    if (o.plan == nullptr) return Status::InvalidArgument("planned replay needs a plan");
    PlanRegistration reg;
    reg.name = s.name();
    reg.schedule = s.SerializeAsString();
    reg.plan = o.plan->SerializeAsString();
    reg.hbm_budget_bytes = o.budget;
    for (std::uint32_t t = 0; t < n; ++t) reg.keys.push_back(key(t));
    auto h = client.RegisterPlan(reg);
    if (!h.ok()) return h.status();
    plan = std::move(h).value();
  }
  // Tensors a step reads: its uses. Tensors it writes: its defs and in-place updates.
  std::vector<std::vector<std::uint32_t>> reads(steps), writes(steps);
  for (std::uint32_t i = 0; i < steps; ++i) {
    reads[i] = lt.used_at(i);
    for (auto t : lt.defined_at(i)) writes[i].push_back(t);
  }
  for (std::uint32_t t = 0; t < n; ++t) {
    for (auto u : s.tensors(static_cast<int>(t)).update_steps()) {
      if (u < steps) writes[u].push_back(t);  // the hooks list an update step as a use too
    }
  }
  const int iterations = s.repeats() ? std::max(1, o.iterations) : 1;
  auto before = client.ServerStat({.reset_peaks = true});
  if (!before.ok()) return before.status();
  auto t0 = Steady::now();
  ServerStats at_measure;
  Steady::time_point measure_start = t0;
  for (int it = 0; it < iterations; ++it) {
    const bool measuring = it == iterations - 1;
    if (measuring) {
      auto st = client.ServerStat({.reset_peaks = true});
      if (!st.ok()) return st.status();
      at_measure = *st;
      measure_start = Steady::now();
    }
    for (std::uint32_t i = 0; i < steps; ++i) {
      const auto step_start = Steady::now();
      if (plan) (void)plan->ReportProgress(static_cast<std::uint64_t>(it), i);
      std::vector<std::string> keys;
      for (auto t : reads[i]) keys.push_back(key(t));
      GetViewOptions want_hbm;
      want_hbm.tier = o.policy == Policy::kNone ? std::nullopt : std::optional(TierKind::kHbm);
      want_hbm.device = o.device && want_hbm.tier.has_value();
      auto views = client.GetViews(keys, want_hbm);
      const auto got = Steady::now();
      const double stall = Us(step_start, got);
      const double compute = std::max(0.0, s.steps(static_cast<int>(i)).compute_us());
      if (measuring) {
        r.stall_us += stall;
        r.compute_us += compute;
        if (o.record_timeline && stall > 0) {
          r.timeline.push_back({TimelineEvent::Kind::kStall, Us(measure_start, step_start), stall,
                                s.steps(static_cast<int>(i)).name()});
        }
        if (o.record_timeline) {
          r.timeline.push_back({TimelineEvent::Kind::kCompute, Us(measure_start, got), compute,
                                s.steps(static_cast<int>(i)).name()});
        }
      }
      // The compute window: check what came back, write the outputs, hold the inputs.
      for (std::size_t k = 0; k < views.size(); ++k) {
        const std::uint32_t t = reads[i][k];
        if (!views[k].ok()) {
          ++out.get_errors;
          if (r.problems.size() < 8) {
            r.problems.push_back("get " + key(t) + " at step " + std::to_string(i) + ": " +
                                 views[k].status().ToString());
          }
          continue;
        }
        const ObjectView& v = *views[k];
        if (o.policy != Policy::kNone && v.meta().tier != TierKind::kHbm) ++out.not_in_hbm;
        bool good = v.size() == size(t);
        const std::uint64_t seed = Seed(t, version[t]);
        if (good && v.size() > 0 && v.device_data() != nullptr) {
          // In device memory: its stamps here, and all of it against its checksum on the GPU.
          good = CheckOnDevice(v.device_data(), v.size(), seed, v.device()) &&
                 (!o.verify_all || v.Verify().ok());
        } else if (good && o.verify_all && written_sum[t] != 0) {
          good = v.meta().checksum == written_sum[t] && v.Verify().ok();
        } else if (good && v.size() > 0) {
          good = Check(v.data(), v.size(), seed) && (!o.verify_all || v.Verify().ok());
        }
        if (!good) ++out.wrong_bytes;
      }
      for (std::size_t k = 0; k < views.size(); ++k) {
        // A tensor updated in place gets its new version once its old one is let go.
        if (std::find(writes[i].begin(), writes[i].end(), reads[i][k]) != writes[i].end()) {
          if (views[k].ok()) views[k]->Release();
        }
      }
      for (auto t : writes[i]) {
        Status st = write(t, TierKind::kHbm);
        if (!st.ok()) {
          if (r.problems.size() < 8) r.problems.push_back("write " + key(t) + ": " + st.ToString());
          ++out.get_errors;
        }
      }
      // Tensors whose last touch this is are dead: deleted now, inside the window (a pinned
      // object is freed when its view goes, at the step's end, as the simulation frees it).
      std::vector<std::string> dead;
      for (auto t : lt.defined_at(i)) {
        if (!lt.persistent(t) && lt.last_touch(t) == i) dead.push_back(key(t));
      }
      for (auto t : reads[i]) {
        if (!lt.persistent(t) && lt.last_touch(t) == i && lt.def(t) != static_cast<int>(i)) {
          dead.push_back(key(t));
        }
      }
      if (!dead.empty()) (void)client.DeleteBatch(dead);
      const auto end = got + std::chrono::nanoseconds(static_cast<std::int64_t>(compute * 1e3));
      // Past the window is host byte work, but for the time the writes waited for room.
      const double past = Us(end, Steady::now()) - room_wait_in_step;
      if (measuring) {
        if (past > 0) out.overrun_us += past;
        out.room_wait_us += room_wait_in_step;
      }
      room_wait_in_step = 0;
      WaitUntil(end);
      views.clear();  // released: one-way messages
    }
  }
  const auto finished = Steady::now();
  r.time_us = Us(measure_start, finished);
  const auto since_us = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(measure_start.time_since_epoch())
          .count());
  StatOptions want_moves;
  if (o.record_timeline) want_moves.moves_since_us = since_us;
  auto after = client.ServerStat(want_moves);
  if (!after.ok()) return after.status();
  // The server's real transfers on their own tracks (both sides read CLOCK_MONOTONIC).
  for (const auto& m : after->moves) {
    if (m.started_us < since_us || !m.ok) continue;
    const bool in = m.to == TierKind::kHbm, out_of = m.from == TierKind::kHbm;
    if (!in && !out_of) continue;
    r.timeline.push_back({in ? TimelineEvent::Kind::kH2D : TimelineEvent::Kind::kD2H,
                          static_cast<double>(m.started_us - since_us),
                          static_cast<double>(m.finished_us - m.started_us),
                          std::to_string(m.bytes >> 10) + " KiB", static_cast<double>(m.bytes)});
  }
  for (const auto& t : after->tiers) {
    if (t.tier == TierKind::kHbm) r.peak_hbm = t.peak_used_bytes;
  }
  r.h2d_bytes =
      LinkBytes(*after, "link_dram_hbm_bytes") - LinkBytes(at_measure, "link_dram_hbm_bytes");
  r.d2h_bytes =
      LinkBytes(*after, "link_hbm_dram_bytes") - LinkBytes(at_measure, "link_hbm_dram_bytes");
  for (const auto& j : after->jobs) {
    // The measured iteration's: the counters since it started.
    const JobInfo* at_start = nullptr;
    for (const auto& pj : at_measure.jobs) {
      if (pj.id == j.id) at_start = &pj;
    }
    auto delta = [&](const char* name) {
      return j.counter(name) - (at_start != nullptr ? at_start->counter(name) : 0);
    };
    r.actions = delta("actions_issued");
    out.hits = delta("hits");
    out.late = delta("late");
    out.misses = delta("misses");
    out.actions_skipped = delta("actions_skipped");
    out.skipped_in_place = delta("skipped_in_place");
    out.skipped_dead = delta("skipped_dead");
    out.skipped_absent = delta("skipped_absent");
    out.waited_for_room = delta("waited_for_room");
  }
  if (o.policy != Policy::kPlanned) {
    r.actions =
        (after->counter("link_dram_hbm_completed") -
         at_measure.counter("link_dram_hbm_completed")) +
        (after->counter("link_hbm_dram_completed") - at_measure.counter("link_hbm_dram_completed"));
  }
  if (plan) (void)plan->Unregister();
  for (std::uint32_t t = 0; t < n; ++t) (void)client.Delete(key(t));
  return out;
}

}  // namespace tierpool::live
