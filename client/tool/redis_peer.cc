#include "client/tool/redis_peer.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "common/copy.h"

namespace tierpool::tool {

namespace {

// Frees a reply when it goes out of scope.
struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

std::string ReadLog(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  return s.size() > 400 ? s.substr(s.size() - 400) : s;
}

}  // namespace

Result<std::unique_ptr<RedisPeer>> RedisPeer::Start(const std::string& binary) {
  std::unique_ptr<RedisPeer> peer(new RedisPeer());
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tierpool-redis-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::Internal("cannot make a directory for redis-server: " +
                            std::string(std::strerror(errno)));
  }
  peer->dir_ = pattern;
  peer->socket_ = peer->dir_ + "/redis.sock";
  const std::string log = peer->dir_ + "/redis.log";
  // Persistence off, no TCP port, the socket readable by this user only.
  std::vector<std::string> args = {
      binary,     "--port",      "0",  "--unixsocket", peer->socket_, "--unixsocketperm",
      "700",      "--save",      "",   "--appendonly", "no",          "--dir",
      peer->dir_, "--daemonize", "no", "--loglevel",   "warning",     "--logfile",
      log};
  peer->pid_ = ::fork();
  if (peer->pid_ < 0) return Status::Internal("fork: " + std::string(std::strerror(errno)));
  if (peer->pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the benchmark
    int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    int status = 0;
    if (::waitpid(peer->pid_, &status, WNOHANG) == peer->pid_) {
      peer->pid_ = -1;
      const bool not_found = WIFEXITED(status) && WEXITSTATUS(status) == 127;
      return Status::FailedPrecondition(not_found ? "cannot run " + binary +
                                                        " (install Debian's redis-server package)"
                                                  : binary + " exited at start: " + ReadLog(log));
    }
    if (std::filesystem::exists(peer->socket_) && peer->Connect().ok()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Unavailable(binary + " did not open its socket within 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return peer;
}

Status RedisPeer::Connect() {
  timeval timeout{5, 0};
  redisContext* c = redisConnectUnixWithTimeout(socket_.c_str(), timeout);
  if (c == nullptr) return Status::Unavailable("cannot allocate a redis context");
  if (c->err != 0) {
    Status s = Status::Unavailable(std::string("redis: ") + c->errstr);
    redisFree(c);
    return s;
  }
  ctx_ = c;
  return Status::Ok();
}

RedisPeer::~RedisPeer() { Stop(); }

void RedisPeer::Stop() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {
      gone = ::waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!gone) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

namespace {

Status ReplyStatus(redisContext* ctx, const Reply& r) {
  if (!r) return Status::Unavailable(std::string("redis: ") + ctx->errstr);
  if (r->type == REDIS_REPLY_ERROR) {
    return Status::Internal("redis: " + std::string(r->str, r->len));
  }
  return Status::Ok();
}

Status CopyValue(redisContext* ctx, const Reply& r, const std::string& key, std::byte* dst,
                 std::uint64_t size) {
  TIERPOOL_RETURN_IF_ERROR(ReplyStatus(ctx, r));
  if (r->type != REDIS_REPLY_STRING) return Status::NotFound("redis has no value for " + key);
  if (r->len != size) {
    return Status::DataLoss("redis returned " + std::to_string(r->len) + " bytes for " + key +
                            ", expected " + std::to_string(size));
  }
  // The copy tierpool's gets make too, so the peer does not pay for where hiredis's buffer sits
  // (glibc's memcpy can be several times slower at some offsets: common/copy.h).
  CopyBytes(dst, r->str, size);
  return Status::Ok();
}

// Reads `count` pipelined replies, checking each; the first failure is the result.
Status ReadReplies(redisContext* ctx, std::size_t count,
                   const std::function<Status(std::size_t, const Reply&)>& check) {
  Status first = Status::Ok();
  for (std::size_t i = 0; i < count; ++i) {
    void* raw = nullptr;
    if (redisGetReply(ctx, &raw) != REDIS_OK) {
      return Status::Unavailable(std::string("redis: ") + ctx->errstr);
    }
    Reply r(static_cast<redisReply*>(raw));
    if (Status s = check(i, r); !s.ok() && first.ok()) first = s;
  }
  return first;
}

}  // namespace

Status RedisPeer::Set(const std::string& key, const std::byte* data, std::uint64_t size) {
  Reply r(static_cast<redisReply*>(
      redisCommand(ctx_, "SET %b %b", key.data(), key.size(), data, static_cast<size_t>(size))));
  return ReplyStatus(ctx_, r);
}

Status RedisPeer::Get(const std::string& key, std::byte* dst, std::uint64_t size) {
  Reply r(static_cast<redisReply*>(redisCommand(ctx_, "GET %b", key.data(), key.size())));
  return CopyValue(ctx_, r, key, dst, size);
}

Status RedisPeer::SetPipelined(const std::vector<std::string>& keys, const std::byte* data,
                               std::uint64_t size_each) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (redisAppendCommand(ctx_, "SET %b %b", keys[i].data(), keys[i].size(), data + i * size_each,
                           static_cast<size_t>(size_each)) != REDIS_OK) {
      return Status::Internal(std::string("redis: ") + ctx_->errstr);
    }
  }
  return ReadReplies(ctx_, keys.size(),
                     [&](std::size_t, const Reply& r) { return ReplyStatus(ctx_, r); });
}

Status RedisPeer::GetPipelined(const std::vector<std::string>& keys, std::byte* dst,
                               std::uint64_t size_each) {
  for (const auto& key : keys) {
    if (redisAppendCommand(ctx_, "GET %b", key.data(), key.size()) != REDIS_OK) {
      return Status::Internal(std::string("redis: ") + ctx_->errstr);
    }
  }
  return ReadReplies(ctx_, keys.size(), [&](std::size_t i, const Reply& r) {
    return CopyValue(ctx_, r, keys[i], dst + i * size_each, size_each);
  });
}

Status RedisPeer::Delete(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    Reply r(static_cast<redisReply*>(redisCommand(ctx_, "DEL %b", key.data(), key.size())));
    TIERPOOL_RETURN_IF_ERROR(ReplyStatus(ctx_, r));
  }
  return Status::Ok();
}

}  // namespace tierpool::tool
