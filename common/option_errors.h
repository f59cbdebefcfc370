// Messages for Boost.Program_options errors that never call what() on them: what() substitutes
// the option's name and value into a template and, in Boost 1.74, loops forever (growing the
// string) when either contains a placeholder such as "%value%". Found by fuzzing tierpoold's
// config file: `io-threads = %value%` hung the daemon at start.
#pragma once

#include <boost/program_options/errors.hpp>
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

}  // namespace tierpool
