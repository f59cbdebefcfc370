#include "store/metrics_server.h"

#include <utility>  // before Boost.Asio, which uses std::exchange without including it

#include <map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/logging.h"
#include "store/metrics.h"

namespace tierpool {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Status ParseListenAddress(const std::string& listen, std::string* host, std::uint16_t* port) {
  std::string h, p;
  if (!listen.empty() && listen[0] == '[') {
    auto close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return Status::InvalidArgument("listen address '" + listen + "': expected [v6addr]:port");
    }
    h = listen.substr(1, close - 1);
    p = listen.substr(close + 2);
  } else {
    auto colon = listen.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Status::InvalidArgument("listen address '" + listen +
                                     "': expected host:port, [v6addr]:port or off");
    }
    h = listen.substr(0, colon);
    p = listen.substr(colon + 1);
  }
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(p) > 65535) {
    return Status::InvalidArgument("listen address '" + listen + "': bad port '" + p + "'");
  }
  boost::system::error_code ec;
  asio::ip::make_address(h, ec);
  if (ec) {
    return Status::InvalidArgument("listen address '" + listen + "': '" + h +
                                   "' is not an IP address");
  }
  *host = h;
  *port = static_cast<std::uint16_t>(std::stoul(p));
  return Status::Ok();
}

Status MetricsServerConfig::validate() const {
  if (!enabled()) return Status::Ok();
  std::string host;
  std::uint16_t port = 0;
  TIERPOOL_RETURN_IF_ERROR(ParseListenAddress(listen, &host, &port));
  if (request_timeout_ms == 0) return Status::InvalidArgument("metrics request timeout is 0");
  if (max_request_bytes < 512) return Status::InvalidArgument("metrics request limit below 512");
  if (max_connections == 0) return Status::InvalidArgument("metrics max_connections is 0");
  if (max_connections_per_address == 0 || write_timeout_ms == 0) {
    return Status::InvalidArgument("metrics max_connections_per_address or write timeout is 0");
  }
  return Status::Ok();
}

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;
using Route = std::function<Response(const Request&)>;

class Session;

// What the sessions share, all on the server's one thread: the slots they hold (by accept order,
// and by address) and the counters.
struct Slots {
  const MetricsServerConfig& config;
  std::map<std::uint64_t, std::weak_ptr<Session>> open;  // by accept order
  std::map<asio::ip::address, std::uint32_t> per_address;
  std::uint64_t next_seq = 0;
  std::atomic<std::uint64_t> served{0}, refused{0}, evicted{0}, timed_out{0};
  explicit Slots(const MetricsServerConfig& c) : config(c) {}
};

// One connection: one request, one response, then close (scrapers reconnect cheaply).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, asio::ip::address from, const Route& route, Slots* slots)
      : stream_(std::move(socket)), from_(std::move(from)), route_(route), slots_(slots) {
    parser_.header_limit(slots->config.max_request_bytes);
    parser_.body_limit(slots->config.max_request_bytes);
  }
  ~Session() {
    slots_->open.erase(seq_);
    auto it = slots_->per_address.find(from_);
    if (it != slots_->per_address.end() && --it->second == 0) slots_->per_address.erase(it);
  }

  void Run(std::uint64_t seq) {
    seq_ = seq;
    stream_.expires_after(std::chrono::milliseconds(slots_->config.request_timeout_ms));
    http::async_read(
        stream_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }
  // Still waiting for its request: may be closed to make room.
  bool waiting() const { return waiting_; }
  void Evict() {
    beast::error_code ignored;
    stream_.socket().close(ignored);  // the pending read ends with an error: nothing answered
  }

 private:
  void OnRead(beast::error_code ec) {
    waiting_ = false;
    if (ec) {  // timeout, oversized or malformed request, or a closed peer: nothing to answer
      if (ec == beast::error::timeout) ++slots_->timed_out;
      if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
          ec != asio::error::operation_aborted && ec != asio::error::bad_descriptor) {
        Reply(Plain(http::status::bad_request, 11, "bad request: " + ec.message() + "\n"));
      }
      return;
    }
    ++slots_->served;
    Reply(route_(parser_.get()));
  }

  static Response Plain(http::status status, unsigned version, std::string body) {
    Response r{status, version};
    r.set(http::field::content_type, "text/plain; charset=utf-8");
    r.body() = std::move(body);
    return r;
  }

  void Reply(Response r) {
    response_ = std::move(r);
    response_.keep_alive(false);
    response_.prepare_payload();
    stream_.expires_after(std::chrono::milliseconds(slots_->config.write_timeout_ms));
    http::async_write(stream_, response_,
                      [self = shared_from_this()](beast::error_code, std::size_t) {
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                      });
  }

  beast::tcp_stream stream_;
  const asio::ip::address from_;
  beast::flat_buffer buffer_;
  http::request_parser<http::string_body> parser_;
  Response response_;
  const Route& route_;
  Slots* slots_;
  std::uint64_t seq_ = 0;
  bool waiting_ = true;
};

}  // namespace

struct MetricsServer::Impl {
  // Declared before io: destroying io destroys pending sessions, which use these.
  Route route;
  Slots slots;
  asio::io_context io;
  tcp::acceptor acceptor{io};

  explicit Impl(const MetricsServerConfig& config) : slots(config) {}

  // Room for one more: true when a slot is free, or was freed by closing the session that has
  // waited longest without sending its request.
  bool MakeRoom() {
    if (slots.open.size() < slots.config.max_connections) return true;
    for (auto& [seq, weak] : slots.open) {
      auto s = weak.lock();
      if (s && s->waiting()) {
        s->Evict();
        ++slots.evicted;
        return true;  // it leaves its slot as its read fails; the limit is overrun by one meanwhile
      }
    }
    return false;
  }

  void Accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) Admit(std::move(socket));
      Accept();
    });
  }

  void Admit(tcp::socket socket) {
    beast::error_code ec;
    const auto from = socket.remote_endpoint(ec).address();
    if (ec) return;
    std::uint32_t& mine = slots.per_address[from];
    if (mine >= slots.config.max_connections_per_address || !MakeRoom()) {
      if (mine == 0) slots.per_address.erase(from);
      ++slots.refused;
      socket.close(ec);
      return;
    }
    ++mine;
    const std::uint64_t seq = slots.next_seq++;
    auto session = std::make_shared<Session>(std::move(socket), from, route, &slots);
    slots.open[seq] = session;
    session->Run(seq);
  }
};

MetricsServer::MetricsServer(MetricsServerConfig config, StatSource source)
    : config_(std::move(config)), source_(std::move(source)) {}

MetricsServer::~MetricsServer() { Stop(); }

Status MetricsServer::Start() {
  TIERPOOL_RETURN_IF_ERROR(config_.validate());
  if (!config_.enabled() || impl_) return Status::Ok();
  std::string host;
  std::uint16_t port = 0;
  TIERPOOL_RETURN_IF_ERROR(ParseListenAddress(config_.listen, &host, &port));
  auto impl = std::make_unique<Impl>(config_);
  impl->route = [this](const Request& req) {
    Response r{http::status::ok, req.version()};
    r.set(http::field::server, "tierpoold");
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      r.result(http::status::method_not_allowed);
      r.set(http::field::allow, "GET, HEAD");
      r.set(http::field::content_type, "text/plain; charset=utf-8");
      r.body() = "only GET and HEAD\n";
      return r;
    }
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (path == "/metrics") {
      wire::StatReply stat;
      source_(&stat);
      r.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      r.body() = PrometheusText(stat);
    } else if (path == "/health") {
      wire::StatReply stat;
      source_(&stat);
      Health h = CheckHealth(stat, shutting_down_.load());
      if (!h.ok) r.result(http::status::service_unavailable);
      r.set(http::field::content_type, "application/json");
      r.body() = h.ToJson() + "\n";
    } else {
      r.result(http::status::not_found);
      r.set(http::field::content_type, "text/plain; charset=utf-8");
      r.body() = "not found: try /metrics or /health\n";
    }
    if (req.method() == http::verb::head) {
      r.content_length(r.body().size());
      r.body().clear();
    }
    return r;
  };
  beast::error_code ec;
  tcp::endpoint endpoint(asio::ip::make_address(host), port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Unavailable("cannot listen for metrics on " + config_.listen + ": " +
                               ec.message());
  }
  port_ = impl->acceptor.local_endpoint().port();
  impl->Accept();
  impl_ = std::move(impl);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tp-metrics");
    impl_->io.run();
  });
  return Status::Ok();
}

MetricsServer::Counters MetricsServer::counters() const {
  Counters c;
  if (!impl_) return c;
  c.served = impl_->slots.served.load();
  c.refused = impl_->slots.refused.load();
  c.evicted = impl_->slots.evicted.load();
  c.timed_out = impl_->slots.timed_out.load();
  return c;
}

void MetricsServer::Stop() {
  if (!impl_) return;
  impl_->io.stop();
  if (thread_.joinable()) thread_.join();
  impl_.reset();
}

}  // namespace tierpool
