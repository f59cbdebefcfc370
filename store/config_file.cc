#include "store/config_file.h"

#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <fstream>
#include <regex>
#include <sstream>

namespace tierpool {

namespace po = boost::program_options;

namespace {

// Printable and bounded: the name comes from the file.
std::string Quoted(std::string_view key) {
  std::string out = "'";
  for (char c : key.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (key.size() > 64) out += "...";
  return out + "'";
}

std::string ShortestDouble(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

bool IsSwitch(const po::option_description& d) { return d.semantic()->max_tokens() == 0; }

// For a line like `dram = 64G`, which TOML cannot parse: sizes are strings. Empty for any other.
std::string SizeHint(const std::string& path, std::size_t line_no) {
  std::ifstream in(path);
  std::string line;
  for (std::size_t i = 0; i < line_no && std::getline(in, line); ++i) {
  }
  static const std::regex size(
      R"(^\s*([A-Za-z0-9_-]+)\s*=\s*([0-9.]+\s*[KMGTkmgt]i?[Bb]?)\s*(#.*)?$)");
  std::smatch m;
  if (!std::regex_match(line, m, size)) return "";
  return "; sizes are strings in TOML: " + m[1].str() + " = \"" + m[2].str() + "\"";
}

}  // namespace

Result<std::vector<std::string>> ConfigFileArgs(const std::string& path,
                                                const po::options_description& options) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0) {  // toml++ reports an unreadable file without a position
      return Status::NotFound("cannot read config file " + path + ": " +
                              std::string(e.description()));
    }
    return Status::InvalidArgument(
        "config file " + path + ", line " + std::to_string(e.source().begin.line) + ": " +
        std::string(e.description()) + SizeHint(path, e.source().begin.line));
  }
  std::vector<std::string> args;
  for (auto&& [k, node] : table) {
    const std::string key(k.str());
    const std::string where = "config file " + path + ": key " + Quoted(key);
    // An exact name only. (find_nothrow still throws when a name matches several options as a
    // prefix, as the empty key matches every one: a file's key is never taken that far.)
    const po::option_description* d = nullptr;
    try {
      if (!key.empty()) d = options.find_nothrow(key, false);
    } catch (const po::error&) {
      d = nullptr;
    }
    if (d == nullptr || key == "config" || key == "help" || key == "version" ||
        key == "print-config") {
      return Status::InvalidArgument(where + " is not a tierpoold option (tierpoold --help)");
    }
    std::string value;
    if (auto s = node.value_exact<std::string>()) {
      value = *s;
    } else if (auto i = node.value_exact<std::int64_t>()) {
      value = std::to_string(*i);
    } else if (auto f = node.value_exact<double>()) {
      value = ShortestDouble(*f);
    } else if (auto b = node.value_exact<bool>()) {
      if (IsSwitch(*d)) {
        if (*b) args.push_back("--" + key);
        continue;
      }
      value = *b ? "true" : "false";
    } else {
      return Status::InvalidArgument(where + " (line " + std::to_string(node.source().begin.line) +
                                     "): expected a string, a number or true/false");
    }
    if (IsSwitch(*d)) {
      return Status::InvalidArgument(where + " is a switch: write true or false");
    }
    args.push_back("--" + key + "=" + value);
  }
  return args;
}

std::string ConfigAsToml(const po::options_description& options, const po::variables_map& vm,
                         const std::vector<std::string>& skip) {
  toml::table out;
  for (const auto& d : options.options()) {
    const std::string& name = d->long_name();
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    if (IsSwitch(*d)) {
      out.insert(name, vm.count(name) != 0);
      continue;
    }
    if (vm.count(name) == 0) continue;  // no value and no default: unset
    const boost::any& v = vm[name].value();
    if (const auto* s = boost::any_cast<std::string>(&v)) {
      out.insert(name, *s);
    } else if (const auto* f = boost::any_cast<double>(&v)) {
      out.insert(name, *f);
    } else if (const auto* b = boost::any_cast<bool>(&v)) {
      out.insert(name, *b);
    } else if (const auto* i = boost::any_cast<int>(&v)) {
      out.insert(name, static_cast<std::int64_t>(*i));
    } else if (const auto* u = boost::any_cast<unsigned>(&v)) {
      out.insert(name, static_cast<std::int64_t>(*u));
    } else if (const auto* ul = boost::any_cast<unsigned long>(&v)) {
      out.insert(name, static_cast<std::int64_t>(*ul));
    } else if (const auto* l = boost::any_cast<long>(&v)) {
      out.insert(name, static_cast<std::int64_t>(*l));
    } else if (const auto* ull = boost::any_cast<unsigned long long>(&v)) {
      out.insert(name, static_cast<std::int64_t>(*ull));
    }
  }
  std::ostringstream text;
  text << "# tierpoold's effective configuration (tierpoold --print-config)\n" << out << "\n";
  return text.str();
}

}  // namespace tierpool
