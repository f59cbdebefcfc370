// The C ABI (tierpool/c.h) against a real tierpoold: every call's happy path, its error codes
// and messages, NULL and out-of-range arguments, and fork(): a child never speaks on its
// parent's connections (a release there would unpin the parent's view).
#include "tierpool/c.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "prefetch/schedule.h"
#include "tests/e2e/server_process.h"

namespace tierpool::testing {
namespace {

class CApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--dram", "64M", "--hbm", "16M"}); }
  static void TearDownTestSuite() { delete server_; }
  void SetUp() override {
    ASSERT_TRUE(server_->started());
    socket_ = server_->socket();
    ASSERT_EQ(Connect(&client_), TP_OK);
  }
  void TearDown() override { tp_close(client_); }
  tp_code Connect(tp_client** out, const char* ns = "c-api") {
    tp_client_options o;
    tp_client_options_init(&o);
    o.socket_path = socket_.c_str();
    o.ns = ns;
    return tp_connect(&o, out, nullptr);
  }
  static std::string TakeError(char*& e) {
    std::string s = e == nullptr ? "" : e;
    tp_free(e);
    e = nullptr;
    return s;
  }
  static ServerProcess* server_;
  std::string socket_;
  tp_client* client_ = nullptr;
};
ServerProcess* CApi::server_ = nullptr;

TEST_F(CApi, PutGetStatListDelete) {
  const std::string bytes = Pattern(1, 100000);
  tp_put_options po;
  tp_put_options_init(&po);
  const int64_t shape[] = {250, 100};
  po.dtype = "float32";
  po.shape = shape;
  po.shape_len = 2;
  po.kind = TP_KIND_ACTIVATION;
  ASSERT_EQ(tp_put(client_, "c/a", bytes.data(), bytes.size(), &po, nullptr), TP_OK);
  EXPECT_STREQ(tp_client_namespace(client_), "c-api");

  std::string back(bytes.size(), '\0');
  size_t size = 0;
  ASSERT_EQ(tp_get(client_, "c/a", back.data(), back.size(), &size, nullptr), TP_OK);
  EXPECT_EQ(size, bytes.size());
  EXPECT_EQ(back, bytes);

  tp_object_meta m;
  ASSERT_EQ(tp_stat_object(client_, "c/a", &m, nullptr), TP_OK);
  EXPECT_STREQ(m.key, "c/a");
  EXPECT_STREQ(m.dtype, "float32");
  ASSERT_EQ(m.shape_len, 2u);
  EXPECT_EQ(m.shape[1], 100);
  EXPECT_EQ(m.size, bytes.size());
  EXPECT_EQ(m.kind, TP_KIND_ACTIVATION);
  EXPECT_EQ(m.durability, TP_DURABILITY_RETAINED);
  EXPECT_EQ(m.tier, TP_TIER_DRAM);
  tp_object_meta_clear(&m);
  EXPECT_EQ(m.key, nullptr);

  ASSERT_EQ(tp_put(client_, "c/b", "xy", 2, nullptr, nullptr), TP_OK);
  tp_object_meta* list = nullptr;
  size_t count = 0;
  ASSERT_EQ(tp_list(client_, "c/", 0, &list, &count, nullptr), TP_OK);
  ASSERT_EQ(count, 2u);
  EXPECT_STREQ(list[0].key, "c/a");
  EXPECT_STREQ(list[1].key, "c/b");
  tp_object_meta_array_free(list, count);

  ASSERT_EQ(tp_promote(client_, "c/a", TP_TIER_HBM, nullptr), TP_OK);
  ASSERT_EQ(tp_stat_object(client_, "c/a", &m, nullptr), TP_OK);
  EXPECT_EQ(m.tier, TP_TIER_HBM);
  tp_object_meta_clear(&m);

  ASSERT_EQ(tp_delete(client_, "c/a", nullptr), TP_OK);
  ASSERT_EQ(tp_delete(client_, "c/b", nullptr), TP_OK);
  char* err = nullptr;
  EXPECT_EQ(tp_get(client_, "c/a", back.data(), back.size(), &size, &err), TP_NOT_FOUND);
  EXPECT_NE(TakeError(err).find("NOT_FOUND"), std::string::npos);
  EXPECT_STREQ(tp_code_name(TP_NOT_FOUND), "NOT_FOUND");
  EXPECT_STREQ(tp_code_name(99), "UNKNOWN");
}

TEST_F(CApi, ViewsAndReservations) {
  tp_reservation* r = nullptr;
  ASSERT_EQ(tp_reserve(client_, "c/res", 4096, nullptr, &r, nullptr), TP_OK);
  ASSERT_EQ(tp_reservation_size(r), 4096u);
  const std::string bytes = Pattern(2, 4096);
  std::memcpy(tp_reservation_data(r), bytes.data(), bytes.size());
  ASSERT_EQ(tp_commit(r, nullptr), TP_OK);

  tp_view* v = nullptr;
  ASSERT_EQ(tp_get_view(client_, "c/res", -1, &v, nullptr), TP_OK);
  ASSERT_EQ(tp_view_size(v), 4096u);
  EXPECT_EQ(std::memcmp(tp_view_data(v), bytes.data(), bytes.size()), 0);
  EXPECT_EQ(tp_view_verify(v, nullptr), TP_OK);
  EXPECT_EQ(tp_view_tier(v), TP_TIER_DRAM);
  tp_object_meta m;
  ASSERT_EQ(tp_stat_object(client_, "c/res", &m, nullptr), TP_OK);
  EXPECT_EQ(m.pins, 1u);
  EXPECT_EQ(m.checksum, tp_view_checksum(v));
  tp_object_meta_clear(&m);
  tp_view_release(v);
  ASSERT_TRUE(server_->WaitFor([](const ServerStats& s) { return s.counter("leases_open") == 0; }));

  // An aborted reservation publishes nothing.
  ASSERT_EQ(tp_reserve(client_, "c/aborted", 64, nullptr, &r, nullptr), TP_OK);
  tp_abort(r);
  EXPECT_EQ(tp_stat_object(client_, "c/aborted", &m, nullptr), TP_NOT_FOUND);
  ASSERT_EQ(tp_delete(client_, "c/res", nullptr), TP_OK);
}

TEST_F(CApi, Batches) {
  const std::string a = Pattern(3, 1000), b = Pattern(4, 70000);
  tp_put_item puts[2] = {{"c/b0", a.data(), a.size(), nullptr, TP_INTERNAL},
                         {"c/b1", b.data(), b.size(), nullptr, TP_INTERNAL}};
  ASSERT_EQ(tp_put_batch(client_, puts, 2, nullptr), TP_OK);
  EXPECT_EQ(puts[0].code, TP_OK);
  EXPECT_EQ(puts[1].code, TP_OK);

  std::string ba(a.size(), '\0'), bb(10, '\0'), bc(10, '\0');
  tp_get_item gets[3] = {{"c/b0", ba.data(), ba.size(), 0, TP_INTERNAL},
                         {"c/b1", bb.data(), bb.size(), 0, TP_INTERNAL},
                         {"c/none", bc.data(), bc.size(), 0, TP_INTERNAL}};
  char* err = nullptr;
  EXPECT_EQ(tp_get_batch(client_, gets, 3, &err), TP_INVALID_ARGUMENT);  // b1's buffer is small
  EXPECT_NE(TakeError(err).find("too small"), std::string::npos);
  EXPECT_EQ(gets[0].code, TP_OK);
  EXPECT_EQ(gets[0].size, a.size());
  EXPECT_EQ(ba, a);
  EXPECT_EQ(gets[1].code, TP_INVALID_ARGUMENT);
  EXPECT_EQ(gets[2].code, TP_NOT_FOUND);

  const char* keys[] = {"c/b0", "c/b1", "c/none"};
  tp_code codes[3];
  EXPECT_EQ(tp_delete_batch(client_, keys, 3, codes, nullptr), TP_NOT_FOUND);
  EXPECT_EQ(codes[0], TP_OK);
  EXPECT_EQ(codes[1], TP_OK);
  EXPECT_EQ(codes[2], TP_NOT_FOUND);
}

TEST_F(CApi, BadArgumentsAreRefusedWithAMessage) {
  char* err = nullptr;
  EXPECT_EQ(tp_put(nullptr, "k", "x", 1, nullptr, &err), TP_INVALID_ARGUMENT);
  EXPECT_NE(TakeError(err).find("client is NULL"), std::string::npos);
  EXPECT_EQ(tp_put(client_, nullptr, "x", 1, nullptr, &err), TP_INVALID_ARGUMENT);
  EXPECT_NE(TakeError(err).find("key is NULL"), std::string::npos);
  EXPECT_EQ(tp_put(client_, "k", nullptr, 1, nullptr, &err), TP_INVALID_ARGUMENT);
  TakeError(err);
  tp_put_options po;
  tp_put_options_init(&po);
  po.kind = 42;
  EXPECT_EQ(tp_put(client_, "k", "x", 1, &po, &err), TP_INVALID_ARGUMENT);
  EXPECT_NE(TakeError(err).find("kind 42"), std::string::npos);
  tp_put_options_init(&po);
  po.shape_len = 3;
  EXPECT_EQ(tp_put(client_, "k", "x", 1, &po, &err), TP_INVALID_ARGUMENT);
  TakeError(err);
  EXPECT_EQ(tp_promote(client_, "k", 7, &err), TP_INVALID_ARGUMENT);
  TakeError(err);
  tp_view* v = reinterpret_cast<tp_view*>(1);
  EXPECT_EQ(tp_get_view(client_, "k", 9, &v, &err), TP_INVALID_ARGUMENT);
  EXPECT_EQ(v, nullptr);
  TakeError(err);
  EXPECT_EQ(tp_put(client_, "", "x", 1, nullptr, &err), TP_INVALID_ARGUMENT);  // server's check
  TakeError(err);
  // A missing error pointer is fine; a NULL handle to free is too.
  EXPECT_EQ(tp_get(client_, "nothing", nullptr, 0, nullptr, nullptr), TP_NOT_FOUND);
  tp_view_release(nullptr);
  tp_abort(nullptr);
  tp_close(nullptr);
  tp_free(nullptr);

  tp_client* c = nullptr;
  tp_client_options o;
  tp_client_options_init(&o);
  o.socket_path = "/tmp/no-such-tierpool-c-api.sock";
  EXPECT_EQ(tp_connect(&o, &c, &err), TP_UNAVAILABLE);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(TakeError(err).find("tierpoold"), std::string::npos);
}

TEST_F(CApi, ServerStatJsonAndPlans) {
  prefetch::Schedule s;
  s.set_format_version(1);
  s.set_name("c-plan");
  s.set_repeats(true);
  for (int i = 0; i < 2; ++i) {
    auto* st = s.add_steps();
    st->set_name("s" + std::to_string(i));
    st->set_compute_us(10);
  }
  auto* t = s.add_tensors();
  t->set_id(0);
  t->set_name("w");
  t->set_size_bytes(4096);
  t->set_kind(tierpool::schedule::WEIGHT);
  t->set_def_step(-1);
  t->add_use_steps(0);
  t->add_use_steps(1);
  const std::string sched = s.SerializeAsString();
  const std::string plan = tierpool::schedule::Plan().SerializeAsString();
  tp_plan_registration reg{"c-job", sched.data(), sched.size(), plan.data(), plan.size(), nullptr,
                           0,       8 << 20};
  tp_plan* p = nullptr;
  char* err = nullptr;
  ASSERT_EQ(tp_register_plan(client_, &reg, &p, &err), TP_OK) << TakeError(err);
  EXPECT_NE(tp_plan_job_id(p), 0u);
  EXPECT_EQ(tp_plan_report_progress(p, 0, 1, nullptr), TP_OK);

  char* json = nullptr;
  ASSERT_EQ(tp_server_stat_json(client_, 0, &json, nullptr), TP_OK);
  auto doc = nlohmann::json::parse(json);
  tp_free(json);
  ASSERT_EQ(doc["jobs"].size(), 1u);
  EXPECT_EQ(doc["jobs"][0]["name"], "c-job");
  EXPECT_EQ(doc["jobs"][0]["id"], tp_plan_job_id(p));
  EXPECT_FALSE(doc["tiers"].empty());

  ASSERT_EQ(tp_plan_unregister(p, nullptr), TP_OK);
  ASSERT_TRUE(server_->WaitFor([](const ServerStats& st) { return st.jobs.empty(); }));
  reg.plan_size = 3;  // a truncated plan
  EXPECT_EQ(tp_register_plan(client_, &reg, &p, &err), TP_INVALID_ARGUMENT);
  TakeError(err);
}

// The parent holds a view; the child inherits it, fails to use the parent's client, releases
// the inherited view (which must send nothing) and works through a client of its own. Before
// the fork guard the child's release unpinned the parent's view.
TEST_F(CApi, AForkedChildNeverUsesItsParentsConnections) {
  const std::string bytes = Pattern(5, 8192);
  ASSERT_EQ(tp_put(client_, "c/fork", bytes.data(), bytes.size(), nullptr, nullptr), TP_OK);
  tp_view* v = nullptr;
  ASSERT_EQ(tp_get_view(client_, "c/fork", -1, &v, nullptr), TP_OK);

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 0;
    char* err = nullptr;
    std::string buf(bytes.size(), '\0');
    if (tp_get(client_, "c/fork", buf.data(), buf.size(), nullptr, &err) !=
        TP_FAILED_PRECONDITION) {
      rc |= 1;
    }
    if (err == nullptr || std::strstr(err, "fork") == nullptr) rc |= 2;
    tp_free(err);
    tp_view_release(v);  // the parent's pin: must stay
    tp_client* own = nullptr;
    if (Connect(&own) != TP_OK ||
        tp_get(own, "c/fork", buf.data(), buf.size(), nullptr, nullptr) != TP_OK || buf != bytes) {
      rc |= 4;
    }
    tp_close(own);
    tp_close(client_);  // the parent's: closes this process's copies only
    ::_exit(rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the parent's client worked in the child; 2: no clear "
                                       "message; 4: the child's own client failed";
  tp_object_meta m;
  ASSERT_EQ(tp_stat_object(client_, "c/fork", &m, nullptr), TP_OK);
  EXPECT_EQ(m.pins, 1u) << "the child's release unpinned the parent's view";
  tp_object_meta_clear(&m);
  EXPECT_EQ(std::memcmp(tp_view_data(v), bytes.data(), bytes.size()), 0);
  tp_view_release(v);
  ASSERT_EQ(tp_delete(client_, "c/fork", nullptr), TP_OK);
}

}  // namespace
}  // namespace tierpool::testing
