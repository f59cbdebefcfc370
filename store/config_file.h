// tierpoold's configuration file: TOML (toml++), one top-level key per flag, named as the flag
// without its dashes:
//
//   socket = "/run/tierpool/tierpool.sock"
//   dram = "64G"              # sizes as strings with K/M/G/T suffixes, or plain integers
//   hbm-high-watermark = 0.9
//   no-populate = true        # a switch: true gives the flag, false leaves it out
//
// Flags given on the command line win over the file. Unknown keys, tables, arrays and TOML
// syntax errors are errors naming the file, the key and (for syntax) the line.
//
// Stateless functions; thread-safe.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tierpool {

// The file as flag words ("--dram=64G", "--no-populate") for `options` to parse.
Result<std::vector<std::string>> ConfigFileArgs(
    const std::string& path, const boost::program_options::options_description& options);

// The effective configuration as TOML that ConfigFileArgs reads back: every option of `options`
// that has a value in `vm` (defaults included), except those named in `skip`.
std::string ConfigAsToml(const boost::program_options::options_description& options,
                         const boost::program_options::variables_map& vm,
                         const std::vector<std::string>& skip);

}  // namespace tierpool
