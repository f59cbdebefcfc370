#include "store/etcd_wire.h"

#include <openssl/evp.h>

#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

namespace tierpool::etcd_wire {

using json = nlohmann::json;

namespace {

// The gateway writes 64-bit numbers as strings.
std::int64_t Int(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) return 0;
  const json& v = j.at(field);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

// A field that must be a string if it is there: "" when absent; nothing (an error to the caller)
// when it is another type. nlohmann's value() would throw, past every caller, on the membership's
// threads.
std::optional<std::string> Str(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) return std::string();
  const json& v = j.at(field);
  if (!v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

bool Bool(const json& j, const char* field) {
  if (!j.is_object() || !j.contains(field)) return false;
  const json& v = j.at(field);
  return v.is_boolean() && v.get<bool>();
}

const json& Field(const json& j, const char* field) {
  static const json kNone = json::object();
  return j.is_object() && j.contains(field) ? j.at(field) : kNone;
}

// The gateway wraps some answers in "result" (keep-alives, watch lines), not others.
const json& ResultOf(const json& j) { return j.contains("result") ? j.at("result") : j; }

Result<EtcdKeyValue> ParseKv(const json& j) {
  const auto key64 = Str(j, "key");
  const auto value64 = Str(j, "value");
  if (!j.is_object() || !key64 || !value64) {
    return Status::Internal("etcd sent a key-value that is not one: " + j.dump());
  }
  EtcdKeyValue kv;
  auto key = Unbase64(*key64);
  if (!key.ok()) return key.status();
  auto value = Unbase64(*value64);
  if (!value.ok()) return value.status();
  kv.key = std::move(key).value();
  kv.value = std::move(value).value();
  kv.mod_revision = Int(j, "mod_revision");
  return kv;
}

Result<json> ParseJson(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Internal("etcd sent malformed JSON");
  if (j.contains("error") || (j.contains("code") && Int(j, "code") != 0)) {
    const auto message = Str(j, "message");
    return Status::Unavailable("etcd: " + (message && !message->empty() ? *message : j.dump()));
  }
  return j;
}

bool IsBase64Char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
         c == '/';
}

}  // namespace

std::string Base64(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Result<std::string> Unbase64(std::string_view in) {
  if (in.empty()) return std::string();
  // OpenSSL's decoder skips whitespace and reads '=' anywhere as zero bits; etcd sends neither,
  // and the padding counted below must be what the decoder saw.
  std::size_t pad = 0;
  if (in.size() % 4 == 0) {
    if (in[in.size() - 1] == '=') ++pad;
    if (pad == 1 && in[in.size() - 2] == '=') ++pad;
  }
  bool valid = in.size() % 4 == 0;
  for (std::size_t i = 0; valid && i < in.size() - pad; ++i) valid = IsBase64Char(in[i]);
  if (!valid) return Status::InvalidArgument("etcd sent malformed base64");
  std::string out(3 * in.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n != static_cast<int>(out.size())) {
    return Status::InvalidArgument("etcd sent malformed base64");
  }
  out.resize(out.size() - pad);
  return out;
}

Result<std::int64_t> LeaseGranted(const std::string& body) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  const std::int64_t id = Int(*j, "ID");
  if (id == 0) return Status::Unavailable("etcd granted no lease: " + j->dump());
  return id;
}

Result<std::int64_t> LeaseTtl(const std::string& body) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  return Int(ResultOf(*j), "TTL");
}

Status PutAnswered(const std::string& body) {
  auto j = ParseJson(body);
  return j.ok() ? Status::Ok() : j.status();
}

Result<std::vector<EtcdKeyValue>> RangeAnswered(const std::string& body, std::int64_t* revision) {
  auto j = ParseJson(body);
  if (!j.ok()) return j.status();
  if (revision != nullptr) *revision = Int(Field(*j, "header"), "revision");
  std::vector<EtcdKeyValue> out;
  const json& kvs = Field(*j, "kvs");
  if (kvs.is_array()) {
    for (const json& kv : kvs) {
      auto parsed = ParseKv(kv);
      if (!parsed.ok()) return parsed.status();
      out.push_back(std::move(parsed).value());
    }
  }
  return out;
}

Status WatchLines::Feed(std::string_view piece,
                        const std::function<bool(const EtcdEvent&)>& on_event, bool* stopped) {
  *stopped = false;
  pending_.append(piece);
  if (pending_.size() > kMaxLine) return Status::Internal("etcd watch: a line over 64 MiB");
  // Looked for only in what arrived since the last look: a long line trickled in pieces would
  // otherwise be scanned again from its start for every piece (quadratic).
  std::size_t start = 0;
  for (std::size_t nl;
       (nl = pending_.find('\n', std::max(start, scanned_))) != std::string::npos;) {
    const std::string_view line(pending_.data() + start, nl - start);
    start = nl + 1;
    if (line.empty()) continue;
    if (Status s = Line(line, on_event, stopped); !s.ok() || *stopped) return s;
  }
  pending_.erase(0, start);
  scanned_ = pending_.size();
  return Status::Ok();
}

Status WatchLines::Line(std::string_view line,
                        const std::function<bool(const EtcdEvent&)>& on_event, bool* stopped) {
  auto j = ParseJson(line);
  if (!j.ok()) return j.status();
  const json& result = ResultOf(*j);
  if (Bool(result, "canceled")) {
    const auto reason = Str(result, "cancel_reason");
    return Status::Unavailable("etcd cancelled the watch: " +
                               (reason && !reason->empty() ? *reason : "compacted?"));
  }
  const json& events = Field(result, "events");
  if (!events.is_array()) return Status::Ok();
  for (const json& e : events) {
    EtcdEvent event;
    const auto type = Str(e, "type");
    if (!e.is_object() || !type) {
      return Status::Internal("etcd sent an event that is not one: " + e.dump());
    }
    event.deleted = *type == "DELETE";
    auto kv = ParseKv(Field(e, "kv"));
    if (!kv.ok()) return kv.status();
    event.kv = std::move(kv).value();
    if (!on_event(event)) {
      *stopped = true;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace tierpool::etcd_wire
