// Byte-size parsing and printing ("64M", "1.5G" <-> bytes), shared by flags, configs and output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tierpool {

inline constexpr std::uint64_t kKiB = 1024;
inline constexpr std::uint64_t kMiB = 1024 * kKiB;
inline constexpr std::uint64_t kGiB = 1024 * kMiB;

// Accepts a decimal number with an optional binary suffix K, M, G or T (case-insensitive,
// optional trailing "B" or "iB"). "0" is valid; negative numbers and overflow are not.
Result<std::uint64_t> ParseByteSize(std::string_view text);

// "64.0 MiB", "512 B".
std::string FormatBytes(std::uint64_t bytes);

inline constexpr std::uint64_t AlignUp(std::uint64_t v, std::uint64_t align) {
  return (v + align - 1) / align * align;
}

}  // namespace tierpool
