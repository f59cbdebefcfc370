#include "store/etcd_client.h"

#include <sys/socket.h>

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "store/etcd_wire.h"
#include "transport/peer_connection.h"
#include "transport/peer_wire.h"

namespace tierpool {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;

using etcd_wire::Base64;

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
  return etcd_wire::LeaseGranted(*body);
}

Result<std::int64_t> EtcdClient::KeepAlive(std::int64_t lease) {
  auto body = Post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!body.ok()) return body.status();
  return etcd_wire::LeaseTtl(*body);
}

Status EtcdClient::Revoke(std::int64_t lease) {
  auto body = Post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return body.ok() ? Status::Ok() : body.status();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, std::int64_t lease) {
  json req{{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  auto body = Post("/v3/kv/put", req.dump());
  return body.ok() ? etcd_wire::PutAnswered(*body) : body.status();
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
  return etcd_wire::RangeAnswered(*body, revision);
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
    etcd_wire::WatchLines lines;
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
      bool stopped = false;
      Status s = lines.Feed(std::string_view(piece, sizeof piece - parser.get().body().size),
                            on_event, &stopped);
      if (!s.ok() || stopped) return s;
    }
    return Status::Unavailable("etcd ended the watch");
  } catch (const boost::system::system_error& e) {
    if (watch_cancelled_) return Status::Aborted("watch cancelled");
    return Status::Unavailable("etcd watch " + endpoint_ + ": " + e.code().message());
  }
}

}  // namespace tierpool
