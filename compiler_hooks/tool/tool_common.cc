#include "compiler_hooks/tool/tool_common.h"

#include <fstream>
#include <iostream>

#include "common/units.h"

namespace tierpool::tool {

int Fail(const Status& s) {
  std::cerr << "tierpool: " << s.ToString() << "\n";
  return 1;
}

Status WriteFile(const std::string& path, const std::string& data) {
  if (path == "-") {
    std::cout << data;
    return std::cout ? Status::Ok() : Status::IoError("cannot write to standard output");
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  return out ? Status::Ok() : Status::IoError("cannot write " + path);
}

Result<prefetch::SplitUpdatesResult> SplitUpdates(const prefetch::Schedule& s,
                                                  const std::string& chunk) {
  auto bytes = ParseByteSize(chunk);
  if (!bytes.ok()) return bytes.status();
  return prefetch::SplitOptimizerUpdates(s, *bytes);
}

}  // namespace tierpool::tool
