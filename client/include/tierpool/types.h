// Vocabulary types of the public API, shared with the server's modules.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierpool {

// The tiers, fastest first. Values travel on the wire.
enum class TierKind : std::uint8_t { kHbm = 0, kDram = 1, kRemote = 2, kNvme = 3 };
inline constexpr int kTierKindCount = 4;

inline std::string_view TierName(TierKind kind) {
  switch (kind) {
    case TierKind::kHbm:
      return "hbm";
    case TierKind::kDram:
      return "dram";
    case TierKind::kRemote:
      return "remote";
    case TierKind::kNvme:
      return "nvme";
  }
  return "unknown";
}

enum class ObjectKind : std::uint8_t {
  kOther = 0,
  kKvBlock = 1,
  kActivation = 2,
  kOptimizerState = 3,
  kWeight = 4,
};

inline std::string_view ObjectKindName(ObjectKind kind) {
  switch (kind) {
    case ObjectKind::kOther:
      return "other";
    case ObjectKind::kKvBlock:
      return "kv_block";
    case ObjectKind::kActivation:
      return "activation";
    case ObjectKind::kOptimizerState:
      return "optimizer_state";
    case ObjectKind::kWeight:
      return "weight";
  }
  return "unknown";
}

// cache: may be dropped when every tier is full (a miss is recomputed).
// retained: never dropped while the server runs; a put that cannot fit fails instead.
enum class Durability : std::uint8_t { kCache = 0, kRetained = 1 };

inline std::string_view DurabilityName(Durability d) {
  return d == Durability::kCache ? "cache" : "retained";
}

struct ObjectMeta {
  std::string ns;
  std::string key;
  std::uint64_t size = 0;
  std::string dtype;
  std::vector<std::int64_t> shape;
  ObjectKind kind = ObjectKind::kOther;
  Durability durability = Durability::kRetained;
  std::uint64_t checksum = 0;  // XXH3-64 of the bytes
  TierKind tier = TierKind::kDram;
  std::uint64_t created_unix_ms = 0;
  std::uint32_t pins = 0;  // readers holding it right now
};

}  // namespace tierpool
