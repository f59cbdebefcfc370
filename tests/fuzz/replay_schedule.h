// The schedule the replay fuzz target replays plans against, and its seeds are made for: a
// training chain of six layers (forward f0..f5, backward b5..b0), each activation read by the
// next forward step and by two backward steps, so that recomputes of it are allowed.
#pragma once

#include <string>

#include "prefetch/schedule.h"

namespace tierpool::fuzz {

inline prefetch::Schedule ReplayChain() {
  constexpr int kLayers = 6;
  prefetch::Schedule s;
  s.set_format_version(1);
  s.set_name("chain");
  for (int i = 0; i < 2 * kLayers; ++i) {
    auto* st = s.add_steps();
    st->set_name("s" + std::to_string(i));
    st->set_compute_us(50);
  }
  auto add = [&](const std::string& name, int def, std::initializer_list<int> uses,
                 schedule::TensorKind kind, std::uint64_t bytes) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    t->set_name(name);
    t->set_size_bytes(bytes);
    t->set_def_step(def);
    t->set_kind(kind);
    for (int u : uses) t->add_use_steps(static_cast<std::uint32_t>(u));
  };
  add("input", -1, {0, 2 * kLayers - 1}, schedule::INPUT, 1 << 20);
  add("workspace", kLayers - 2, {kLayers - 1}, schedule::ACTIVATION, 6 << 20);
  for (int i = 0; i < kLayers; ++i) {
    const int back = 2 * kLayers - 1 - i;
    if (i + 1 < kLayers) {
      add("x" + std::to_string(i), i, {i + 1, back - 1, back}, schedule::SAVED_ACTIVATION, 1 << 20);
    } else {
      add("x" + std::to_string(i), i, {back}, schedule::SAVED_ACTIVATION, 1 << 20);
    }
    add("w" + std::to_string(i), -1, {i, back}, schedule::WEIGHT, 64 << 10);
  }
  return s;
}

}  // namespace tierpool::fuzz
