// Messages for Boost.Program_options errors that never call what() on them: what() substitutes
// the option's name and value into a template and, in Boost 1.74, loops forever (growing the
// string) when either contains a placeholder such as "%value%". Found by fuzzing tierpoold's
// config file: `io-threads = %value%` hung the daemon at start.
#pragma once

#include <boost/program_options.hpp>
#include <iostream>
#include <optional>
#include <string>

namespace tierpool {

inline std::string OptionErrorMessage(const boost::program_options::error& e) {
  namespace po = boost::program_options;
  const auto* named = dynamic_cast<const po::error_with_option_name*>(&e);
  if (named == nullptr) return e.what();  // fixed messages, nothing substituted
  std::string name;
  for (char c : named->get_option_name()) {  // outside input: printable, and not too much of it
    if (name.size() == 64) {
      name += "...";
      break;
    }
    name += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  const std::string quoted = "'" + name + "'";
  if (dynamic_cast<const po::unknown_option*>(&e)) return "unknown option " + quoted;
  if (dynamic_cast<const po::multiple_occurrences*>(&e)) {
    return "option " + quoted + " given more than once";
  }
  if (dynamic_cast<const po::validation_error*>(&e)) return "invalid value for option " + quoted;
  if (dynamic_cast<const po::invalid_syntax*>(&e)) return "bad syntax at option " + quoted;
  if (dynamic_cast<const po::required_option*>(&e)) return "option " + quoted + " is required";
  return "bad option " + quoted;
}

// Parses a small tool's command line into `vm`. A bad option prints "<tool>: why" and the
// options to standard error, --help the options to standard output; either way the status for
// main to return comes back (2, 0). nullopt: go on.
inline std::optional<int> ParseToolOptions(int argc, char** argv,
                                           const boost::program_options::options_description& opts,
                                           const std::string& tool,
                                           boost::program_options::variables_map* vm) {
  namespace po = boost::program_options;
  try {
    po::store(po::parse_command_line(argc, argv, opts), *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    std::cerr << tool << ": " << OptionErrorMessage(e) << "\n" << opts;
    return 2;
  }
  if (vm->count("help")) {
    std::cout << opts;
    return 0;
  }
  return std::nullopt;
}

}  // namespace tierpool
