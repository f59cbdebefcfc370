#include "store/etcd_client.h"

#include <openssl/evp.h>
#include <sys/socket.h>

#include <optional>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "transport/peer_connection.h"
#include "transport/peer_wire.h"

namespace tierpool {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;

namespace {

std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

Result<std::string> Unbase64(const std::string& in) {
  if (in.empty()) return std::string();
  if (in.size() % 4 != 0) return Status::InvalidArgument("etcd sent malformed base64");
  std::string out(3 * in.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) return Status::InvalidArgument("etcd sent malformed base64");
  std::size_t pad = 0;
  if (in.size() >= 1 && in[in.size() - 1] == '=') ++pad;
  if (in.size() >= 2 && in[in.size() - 2] == '=') ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

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

Result<json> ParseJson(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::Internal("etcd sent malformed JSON");
  if (j.contains("error") || (j.contains("code") && Int(j, "code") != 0)) {
    const auto message = Str(j, "message");
    return Status::Unavailable("etcd: " + (message && !message->empty() ? *message : j.dump()));
  }
  return j;
}

}  // namespace

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Result<EtcdClient> EtcdClient::Create(const std::string& url, std::uint32_t timeout_ms) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    return Status::InvalidArgument("--etcd " + url + ": give http://host:port");
  }
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::string host, port;
  if (Status s = transport::SplitHostPort(rest, &host, &port); !s.ok()) {
    return Status::InvalidArgument("--etcd " + url + ": give http://host:port");
  }
  return EtcdClient(host, port, timeout_ms);
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    asio::ip::tcp::socket socket(io);
    asio::connect(socket, resolver.resolve(host_, port_));
    (void)transport::SetSocketTimeouts(socket.native_handle(), timeout_ms_);
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, endpoint_);
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(socket, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(16u << 20);
    http::read(socket, buffer, parser);
    auto res = parser.release();
    boost::system::error_code ignored;
    socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    if (res.result() != http::status::ok) {
      return Status::Unavailable("etcd " + endpoint_ + path + ": HTTP " +
                                 std::to_string(res.result_int()) + " " + res.body());
    }
    return std::move(res.body());
  } catch (const boost::system::system_error& e) {
    return Status::Unavailable("etcd " + endpoint_ + ": " + e.code().message());
  }
}

Result<std::int64_t> EtcdClient::GrantLease(std::int64_t ttl_s) {
  auto body = Post("/v3/lease/grant", json{{"TTL", ttl_s}}.dump());
  if (!body.ok()) return body.status();
  auto j = ParseJson(*body);
  if (!j.ok()) return j.status();
  const std::int64_t id = Int(*j, "ID");
  if (id == 0) return Status::Unavailable("etcd granted no lease: " + *body);
  return id;
}

Result<std::int64_t> EtcdClient::KeepAlive(std::int64_t lease) {
  auto body = Post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!body.ok()) return body.status();
  auto j = ParseJson(*body);
  if (!j.ok()) return j.status();
  const json& result = j->contains("result") ? j->at("result") : *j;
  return Int(result, "TTL");
}

Status EtcdClient::Revoke(std::int64_t lease) {
  auto body = Post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return body.ok() ? Status::Ok() : body.status();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, std::int64_t lease) {
  json req{{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  auto body = Post("/v3/kv/put", req.dump());
  if (!body.ok()) return body.status();
  auto j = ParseJson(*body);
  return j.ok() ? Status::Ok() : j.status();
}

Status EtcdClient::Delete(const std::string& key) {
  auto body = Post("/v3/kv/deleterange", json{{"key", Base64(key)}}.dump());
  return body.ok() ? Status::Ok() : body.status();
}

Result<std::vector<EtcdKeyValue>> EtcdClient::RangePrefix(const std::string& prefix,
                                                          std::int64_t* revision) {
  auto body = Post("/v3/kv/range",
                   json{{"key", Base64(prefix)}, {"range_end", Base64(PrefixEnd(prefix))}}.dump());
  if (!body.ok()) return body.status();
  auto j = ParseJson(*body);
  if (!j.ok()) return j.status();
  if (revision != nullptr) {
    *revision = Int(j->contains("header") ? j->at("header") : json::object(), "revision");
  }
  std::vector<EtcdKeyValue> out;
  if (j->contains("kvs") && j->at("kvs").is_array()) {
    for (const json& kv : j->at("kvs")) {
      auto parsed = ParseKv(kv);
      if (!parsed.ok()) return parsed.status();
      out.push_back(std::move(parsed).value());
    }
  }
  return out;
}

void EtcdClient::CancelWatch() {
  watch_cancelled_ = true;
  const int fd = watch_fd_.load();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

Status EtcdClient::Watch(const std::string& prefix, std::int64_t start_revision,
                         const std::function<bool(const EtcdEvent&)>& on_event) {
  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    asio::ip::tcp::socket socket(io);
    asio::connect(socket, resolver.resolve(host_, port_));
    watch_fd_ = socket.native_handle();
    struct Clear {
      std::atomic<int>& fd;
      ~Clear() { fd = -1; }
    } clear{watch_fd_};
    if (watch_cancelled_) return Status::Aborted("watch cancelled");
    json create{{"key", Base64(prefix)}, {"range_end", Base64(PrefixEnd(prefix))}};
    if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
    http::request<http::string_body> req{http::verb::post, "/v3/watch", 11};
    req.set(http::field::host, endpoint_);
    req.set(http::field::content_type, "application/json");
    req.body() = json{{"create_request", create}}.dump();
    req.prepare_payload();
    http::write(socket, req);
    // The answer is a stream of JSON objects, one per line, in a chunked body: read it a piece
    // at a time and cut it at newlines.
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    http::read_header(socket, buffer, parser);
    if (parser.get().result() != http::status::ok) {
      return Status::Unavailable("etcd watch: HTTP " + std::to_string(parser.get().result_int()));
    }
    std::string pending;
    std::size_t scanned = 0;  // bytes at the start of `pending` that hold no newline
    char piece[16384];
    while (!parser.is_done()) {
      parser.get().body().data = piece;
      parser.get().body().size = sizeof piece;
      boost::system::error_code ec;
      http::read_some(socket, buffer, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        if (watch_cancelled_) return Status::Aborted("watch cancelled");
        return Status::Unavailable("etcd watch: " + ec.message());
      }
      pending.append(piece, sizeof piece - parser.get().body().size);
      if (pending.size() > (64u << 20)) return Status::Internal("etcd watch: a line over 64 MiB");
      // Looked for only in what arrived since the last look: a long line trickled in pieces
      // would otherwise be scanned again from its start for every piece (quadratic).
      for (std::size_t nl; (nl = pending.find('\n', scanned)) != std::string::npos;) {
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        scanned = 0;
        if (line.empty()) continue;
        auto j = ParseJson(line);
        if (!j.ok()) return j.status();
        const json& result = j->contains("result") ? j->at("result") : *j;
        if (Bool(result, "canceled")) {
          const auto reason = Str(result, "cancel_reason");
          return Status::Unavailable("etcd cancelled the watch: " +
                                     (reason && !reason->empty() ? *reason : "compacted?"));
        }
        if (!result.contains("events") || !result.at("events").is_array()) continue;
        for (const json& e : result.at("events")) {
          EtcdEvent event;
          const auto type = Str(e, "type");
          if (!e.is_object() || !type) {
            return Status::Internal("etcd sent an event that is not one: " + e.dump());
          }
          event.deleted = *type == "DELETE";
          auto kv = ParseKv(e.contains("kv") ? e.at("kv") : json::object());
          if (!kv.ok()) return kv.status();
          event.kv = std::move(kv).value();
          if (!on_event(event)) return Status::Ok();
        }
      }
      scanned = pending.size();
    }
    return Status::Unavailable("etcd ended the watch");
  } catch (const boost::system::system_error& e) {
    if (watch_cancelled_) return Status::Aborted("watch cancelled");
    return Status::Unavailable("etcd watch " + endpoint_ + ": " + e.code().message());
  }
}

}  // namespace tierpool
