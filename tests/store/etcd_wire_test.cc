#include "store/etcd_wire.h"

#include <gtest/gtest.h>

#include <random>

namespace tierpool::etcd_wire {
namespace {

TEST(EtcdWire, Base64IsStrict) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    auto back = Unbase64(Base64(s));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, s);
  }
  // What OpenSSL's decoder would take (whitespace skipped, '=' read as zero bits anywhere) but
  // etcd never sends; "AA==" then four spaces decoded as three bytes, two of them made up.
  for (const char* bad :
       {"AA==    ", " AA=", "A=AA", "AAA", "====", "A===", "AA=A", "AB\nC", "AA\0A", "QUJD-A=="}) {
    EXPECT_EQ(Unbase64(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(EtcdWire, AnswersOfTheWrongShapeAreErrors) {
  EXPECT_EQ(*LeaseGranted(R"({"ID":"7","TTL":"5"})"), 7);
  EXPECT_EQ(LeaseGranted(R"({"TTL":"5"})").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(LeaseGranted("[1]").status().code(), StatusCode::kInternal);
  EXPECT_EQ(*LeaseTtl(R"({"result":{"TTL":"3"}})"), 3);
  EXPECT_EQ(*LeaseTtl(R"({"result":{}})"), 0);
  EXPECT_EQ(*LeaseTtl(R"({"result":{"TTL":"99999999999999999999999"}})"), 0);
  EXPECT_EQ(PutAnswered(R"({"error":"x","code":5,"message":"no"})").code(),
            StatusCode::kUnavailable);
  std::int64_t revision = -1;
  auto kvs = RangeAnswered(
      R"({"header":{"revision":"12"},"kvs":[{"key":"YQ==","value":"Yg==","mod_revision":"9"}]})",
      &revision);
  ASSERT_TRUE(kvs.ok()) << kvs.status().ToString();
  EXPECT_EQ(revision, 12);
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_EQ((*kvs)[0].key, "a");
  EXPECT_EQ((*kvs)[0].value, "b");
  EXPECT_EQ((*kvs)[0].mod_revision, 9);
  for (const char* bad : {R"({"header":[],"kvs":[{"key":7}]})", R"({"kvs":["x"]})",
                          R"({"kvs":[{"key":"YQ","value":""}]})"}) {
    EXPECT_FALSE(RangeAnswered(bad, &revision).ok()) << bad;
  }
  EXPECT_TRUE(RangeAnswered(R"({"header":"x","kvs":{}})", &revision)->empty());
}

// The same body cut into pieces anywhere gives the same events and the same end.
TEST(EtcdWire, WatchLinesGiveTheSameEventsHoweverTheBodyIsCut) {
  std::string body;
  for (int i = 0; i < 50; ++i) {
    body += R"({"result":{"events":[{"type":")" + std::string(i % 3 == 0 ? "DELETE" : "PUT") +
            R"(","kv":{"key":")" + Base64("k" + std::to_string(i)) + R"(","value":")" +
            Base64(std::string(static_cast<std::size_t>(i * 37), 'v')) + R"("}}]}})" + "\n";
    if (i % 7 == 0) body += "\n";
  }
  body += R"({"result":{"canceled":true,"cancel_reason":"compacted"}})"
          "\n";
  auto run = [&](std::mt19937& rng, std::size_t max_piece) {
    WatchLines lines;
    std::vector<std::string> events;
    Status end = Status::Ok();
    for (std::size_t at = 0; at < body.size() && end.ok();) {
      const std::size_t n = std::min(body.size() - at, 1 + rng() % max_piece);
      bool stopped = false;
      end = lines.Feed(
          std::string_view(body).substr(at, n),
          [&](const EtcdEvent& e) {
            events.push_back((e.deleted ? "-" : "+") + e.kv.key + "=" +
                             std::to_string(e.kv.value.size()));
            return true;
          },
          &stopped);
      at += n;
    }
    return std::make_pair(events, end);
  };
  std::mt19937 rng(1);
  const auto whole = run(rng, body.size());
  ASSERT_EQ(whole.first.size(), 50u);
  EXPECT_EQ(whole.first[3], "-k3=111");
  EXPECT_EQ(whole.second.code(), StatusCode::kUnavailable);
  for (std::size_t max_piece : {1, 2, 7, 64, 1000}) {
    const auto cut = run(rng, max_piece);
    EXPECT_EQ(cut.first, whole.first) << max_piece;
    EXPECT_EQ(cut.second.code(), whole.second.code()) << max_piece;
  }
  // A callback that says stop: nothing after that event.
  WatchLines lines;
  int seen = 0;
  bool stopped = false;
  EXPECT_TRUE(lines
                  .Feed(
                      body, [&](const EtcdEvent&) { return ++seen < 3; }, &stopped)
                  .ok());
  EXPECT_TRUE(stopped);
  EXPECT_EQ(seen, 3);
}

}  // namespace
}  // namespace tierpool::etcd_wire
