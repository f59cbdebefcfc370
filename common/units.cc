#include "common/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tierpool {

Result<std::uint64_t> ParseByteSize(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty()) return Status::InvalidArgument("empty size");
  std::size_t digits = 0;
  bool seen_dot = false;
  while (digits < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[digits])) || (s[digits] == '.' && !seen_dot))) {
    seen_dot |= s[digits] == '.';
    ++digits;
  }
  if (digits == 0) return Status::InvalidArgument("size '" + std::string(text) + "' has no number");
  double number = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + digits, number);
  if (ec != std::errc() || ptr != s.data() + digits) {
    return Status::InvalidArgument("size '" + std::string(text) + "' is not a number");
  }
  std::string suffix;
  for (char c : s.substr(digits)) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  std::uint64_t mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    mult = kKiB;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    mult = kMiB;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    mult = kGiB;
  } else if (suffix == "T" || suffix == "TB" || suffix == "TIB") {
    mult = kGiB * 1024;
  } else {
    return Status::InvalidArgument("size '" + std::string(text) +
                                   "' has an unknown suffix (use K, M, G or T)");
  }
  double bytes = number * static_cast<double>(mult);
  if (!std::isfinite(bytes) || bytes >= 18446744073709551615.0) {
    return Status::InvalidArgument("size '" + std::string(text) + "' is too large");
  }
  return static_cast<std::uint64_t>(std::llround(bytes));
}

std::string FormatBytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  }
  return buf;
}

}  // namespace tierpool
