// The etcd client against a fake etcd on loopback that answers with JSON of the wrong shapes: a
// key that is a number, a kv that is a list, a "canceled" that is a string. Every call must come
// back with an error, never throw (the membership's threads would end the process).
#include "store/etcd_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <sys/socket.h>

#include <string>
#include <thread>
#include <vector>

#include "common/posix.h"
#include "tests/testing/loopback_listener.h"

namespace tierpool {
namespace {

// Answers each of `bodies.size()` connections, in turn, with an HTTP response carrying that
// body (chunked when `chunked`), whatever was asked.
class FakeEtcd {
 public:
  FakeEtcd(std::vector<std::string> bodies, bool chunked) {
    EXPECT_TRUE(listener_.fd.valid());
    thread_ = std::thread([this, bodies = std::move(bodies), chunked] {
      for (const auto& body : bodies) {
        UniqueFd fd(::accept(listener_.fd.get(), nullptr, nullptr));
        if (!fd.valid()) return;
        ReadRequest(fd.get());
        std::string out = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
        if (chunked) {
          char size[32];
          std::snprintf(size, sizeof size, "%zx\r\n", body.size());
          out += "Transfer-Encoding: chunked\r\n\r\n" + std::string(size) + body + "\r\n0\r\n\r\n";
        } else {
          out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
        }
        (void)::send(fd.get(), out.data(), out.size(), MSG_NOSIGNAL);
        ::shutdown(fd.get(), SHUT_WR);
        char sink[4096];
        while (::recv(fd.get(), sink, sizeof sink, 0) > 0) {
        }
      }
    });
  }
  ~FakeEtcd() { thread_.join(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(listener_.port); }

 private:
  // The header and a body of its Content-Length.
  static void ReadRequest(int fd) {
    std::string in;
    char buf[4096];
    std::size_t end = std::string::npos;
    while ((end = in.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<std::size_t>(n));
    }
    std::size_t length = 0;
    if (auto at = in.find("Content-Length: "); at != std::string::npos) {
      length = std::stoul(in.substr(at + 16));
    }
    while (in.size() < end + 4 + length) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, static_cast<std::size_t>(n));
    }
  }

  const testing::LoopbackListener listener_ = testing::ListenOnLoopback(4);
  std::thread thread_;
};

TEST(EtcdClient, RepliesOfTheWrongShapeAreErrorsNotExceptions) {
  const std::vector<std::string> ranges = {
      R"({"kvs": [{"key": 12, "value": "eA=="}]})",
      R"({"kvs": [{"key": "eA==", "value": ["x"]}]})",
      R"({"kvs": [17]})",
      R"({"header": {"revision": {"a": 1}}, "kvs": [{"key": "eA==", "value": "eA=="}]})",
      R"({"error": "x", "message": 42})",
  };
  FakeEtcd fake(ranges, /*chunked=*/false);
  auto etcd = EtcdClient::Create(fake.url(), 2000);
  ASSERT_TRUE(etcd.ok());
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    std::int64_t revision = 0;
    Result<std::vector<EtcdKeyValue>> got = Status::Internal("not run");
    EXPECT_NO_THROW(got = etcd->RangePrefix("/tierpool/", &revision)) << ranges[i];
    if (i == 3) {  // a revision that is not a number is none; the kv itself is fine
      EXPECT_TRUE(got.ok()) << got.status().ToString();
    } else {
      EXPECT_FALSE(got.ok()) << ranges[i];
    }
  }
}

TEST(EtcdClient, WatchEventsOfTheWrongShapeEndTheWatchWithAnError) {
  const std::vector<std::string> streams = {
      "{\"result\": {\"events\": [{\"kv\": [1, 2]}]}}\n",
      "{\"result\": {\"events\": [{\"type\": 7, \"kv\": {\"key\": \"eA==\"}}]}}\n",
      "{\"result\": {\"canceled\": \"yes\"}}\n",
      "{\"result\": {\"events\": [{\"kv\": {\"key\": {}, \"value\": \"eA==\"}}]}}\n",
  };
  FakeEtcd fake(streams, /*chunked=*/true);
  auto etcd = EtcdClient::Create(fake.url(), 2000);
  ASSERT_TRUE(etcd.ok());
  for (const auto& stream : streams) {
    int events = 0;
    Status s;
    EXPECT_NO_THROW(s = etcd->Watch("/tierpool/", 0, [&](const EtcdEvent&) {
      ++events;
      return true;
    })) << stream;
    EXPECT_FALSE(s.ok()) << stream;
  }
}

// Lines longer than the client's 16 KiB reads, and several lines in one read: each event whole,
// in order (lines are cut where the newline is, whichever read brought it).
TEST(EtcdClient, WatchLinesAreCutAtTheirNewlinesWhateverTheReads) {
  auto b64 = [](const std::string& in) {  // what the gateway sends, by OpenSSL as the client
    std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
    out.resize(static_cast<std::size_t>(EVP_EncodeBlock(
        reinterpret_cast<unsigned char*>(out.data()),
        reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()))));
    return out;
  };
  const std::vector<std::size_t> sizes = {1, 40 << 10, 3, 100 << 10, 2, 17};
  std::vector<std::string> values;
  std::string stream;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    values.push_back(std::string(sizes[i], static_cast<char>('a' + i)));
    stream += R"({"result": {"events": [{"type": "PUT", "kv": {"key": ")" +
              b64("/tierpool/" + std::to_string(i)) + R"(", "value": ")" + b64(values[i]) +
              "\"}}]}}\n";
  }
  FakeEtcd fake({stream}, /*chunked=*/true);
  auto etcd = EtcdClient::Create(fake.url(), 2000);
  ASSERT_TRUE(etcd.ok());
  std::vector<EtcdEvent> got;
  Status s = etcd->Watch("/tierpool/", 0, [&](const EtcdEvent& e) {
    got.push_back(e);
    return true;
  });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();  // the stream ended
  ASSERT_EQ(got.size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(got[i].kv.key, "/tierpool/" + std::to_string(i));
    EXPECT_EQ(got[i].kv.value, values[i]) << "event " << i;
  }
}

}  // namespace
}  // namespace tierpool
