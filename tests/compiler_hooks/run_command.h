// What a command prints (standard output and error), and its exit status as pclose gives it:
// for the compiler_hooks tests that run the tool.
#pragma once

#include <cstdio>
#include <string>
#include <utility>

namespace tierpool::hooks {

inline std::pair<std::string, int> RunCommand(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  if (p == nullptr) return {out, -1};
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  return {out, ::pclose(p)};
}

}  // namespace tierpool::hooks
