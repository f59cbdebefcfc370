#include "prefetch/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

namespace tierpool::prefetch {
namespace {

// A hand-made graph: w (weight, 100 B) used at 0 and 3; a = op0(w) 10 B used at 1 and 3;
// b = op1(a) 20 B used at 2; c = op2(b) 5 B never used.
Schedule Tiny(bool repeats) {
  Schedule s;
  s.set_format_version(1);
  s.set_name("tiny");
  s.set_repeats(repeats);
  for (int i = 0; i < 4; ++i) {
    auto* st = s.add_steps();
    st->set_name("op" + std::to_string(i));
    st->set_compute_us(10);
  }
  auto add = [&](const char* name, std::uint64_t size, int def, std::vector<std::uint32_t> uses,
                 schedule::TensorKind kind) {
    auto* t = s.add_tensors();
    t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
    t->set_name(name);
    t->set_size_bytes(size);
    t->set_def_step(def);
    t->set_kind(kind);
    for (auto u : uses) t->add_use_steps(u);
  };
  add("w", 100, -1, {0, 3}, schedule::WEIGHT);
  add("a", 10, 0, {1, 3}, schedule::ACTIVATION);
  add("b", 20, 1, {2}, schedule::ACTIVATION);
  add("c", 5, 2, {}, schedule::ACTIVATION);
  return s;
}

TEST(Lifetimes, UseDefChainsAndMemoryCurve) {
  Schedule s = Tiny(true);
  ASSERT_TRUE(Validate(s).ok());
  Lifetimes lt(s);
  EXPECT_TRUE(lt.persistent(0));
  EXPECT_EQ(lt.def(1), 0);
  EXPECT_EQ(lt.last_touch(1), 3u);
  EXPECT_EQ(lt.last_touch(3), 2u);  // never used: dies after its def
  EXPECT_EQ(lt.NextUse(1, 2), 3u);
  EXPECT_EQ(lt.NextUse(2, 3), kNoUse);
  EXPECT_EQ(lt.NextUse(0, 1), 3u);
  EXPECT_EQ(lt.used_at(3), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(lt.defined_at(1), (std::vector<std::uint32_t>{2}));
  // 0: w+a = 110; 1: w+a+b = 130; 2: w+a+b+c = 135; 3: w+a = 110.
  EXPECT_EQ(lt.memory_curve(), (std::vector<std::uint64_t>{110, 130, 135, 110}));
  EXPECT_EQ(lt.peak_bytes(), 135u);
  EXPECT_EQ(lt.persistent_bytes(), 100u);
  // What each step touches: 0: w+a = 110; 1: a+b = 30; 2: b+c = 25; 3: w+a = 110.
  EXPECT_EQ(lt.step_floor_bytes(), 110u);
  EXPECT_EQ(lt.step_floor_step(), 0u);
}

TEST(Validate, RejectsHostileSchedules) {
  auto bad = [](auto mutate) {
    Schedule s = Tiny(false);
    mutate(s);
    return Validate(s);
  };
  EXPECT_FALSE(bad([](Schedule& s) { s.set_format_version(9); }).ok());
  EXPECT_FALSE(bad([](Schedule& s) { s.clear_steps(); }).ok());
  EXPECT_FALSE(bad([](Schedule& s) { s.mutable_tensors(1)->set_id(7); }).ok());
  EXPECT_FALSE(bad([](Schedule& s) { s.mutable_tensors(1)->add_use_steps(99); }).ok());
  EXPECT_FALSE(
      bad([](Schedule& s) { s.mutable_tensors(1)->set_def_step(2); }).ok());  // use 1 < def
  EXPECT_FALSE(bad([](Schedule& s) { s.mutable_tensors(1)->set_def_step(-5); }).ok());
  EXPECT_FALSE(bad([](Schedule& s) { s.mutable_steps(0)->set_compute_us(-1); }).ok());
  EXPECT_FALSE(bad([](Schedule& s) { s.mutable_tensors(0)->set_size_bytes(1ull << 60); }).ok());
  // Each tensor within its limit, all of them past what 64-bit sums of a step or a curve hold.
  Status total = bad([](Schedule& s) {
    for (int i = 0; i < 5000; ++i) {
      auto* t = s.add_tensors();
      t->set_id(static_cast<std::uint32_t>(s.tensors_size() - 1));
      t->set_name("big" + std::to_string(i));
      t->set_size_bytes(1ull << 44);
      t->set_def_step(-1);
      t->add_use_steps(0);
    }
  });
  EXPECT_FALSE(total.ok());
  EXPECT_NE(total.message().find("PiB"), std::string::npos) << total.message();
  // Two tensors of one name would be one object in a live job.
  EXPECT_FALSE(bad([](Schedule& s) { s.mutable_tensors(1)->set_name(s.tensors(0).name()); }).ok());
  Status s = bad([](Schedule& x) { x.mutable_tensors(2)->add_use_steps(1); });
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(b)"), std::string::npos) << s.message();
}

TEST(Schedule, JsonAndBinaryRoundTrip) {
  Schedule s = Tiny(true);
  std::string dir = ::testing::TempDir();
  ASSERT_TRUE(SaveSchedule(s, dir + "/tiny.pb").ok());
  ASSERT_TRUE(SaveScheduleJson(s, dir + "/tiny.json").ok());
  auto a = LoadSchedule(dir + "/tiny.pb");
  auto b = LoadSchedule(dir + "/tiny.json");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->SerializeAsString(), s.SerializeAsString());
  EXPECT_EQ(b->SerializeAsString(), s.SerializeAsString());
  EXPECT_FALSE(ParseScheduleJson("{\"steps\": 3}").ok());
  EXPECT_FALSE(ParseScheduleJson("not json").ok());
  EXPECT_EQ(LoadSchedule(dir + "/missing.pb").status().code(), StatusCode::kNotFound);
}

// A plan from a file is outside input: every field is checked against the schedule it names.
TEST(Plan, ValidateRejectsWhatTheScheduleDoesNotHave) {
  Schedule s = Tiny(true);
  schedule::Plan good;
  good.set_format_version(1);
  good.set_schedule("tiny");
  good.set_hbm_budget_bytes(120);
  auto* a = good.add_actions();
  a->set_kind(schedule::PREFETCH);
  a->set_tensor(0);
  a->set_step(1);
  a->set_needed_by(3);
  good.add_resident_at_start(0);
  EXPECT_TRUE(ValidatePlan(good, s).ok());
  auto bad = [&](auto change) {
    schedule::Plan p = good;
    change(&p);
    return ValidatePlan(p, s);
  };
  EXPECT_FALSE(bad([](auto* p) { p->mutable_actions(0)->set_tensor(4); }).ok());
  EXPECT_FALSE(bad([](auto* p) { p->mutable_actions(0)->set_step(4); }).ok());
  EXPECT_FALSE(bad([](auto* p) { p->mutable_actions(0)->set_needed_by(4); }).ok());
  EXPECT_FALSE(bad([](auto* p) {
                 p->mutable_actions(0)->set_kind(static_cast<schedule::ActionKind>(7));
               }).ok());
  EXPECT_FALSE(bad([](auto* p) { p->mutable_actions(0)->set_delay_us(-1); }).ok());
  EXPECT_FALSE(bad([](auto* p) { p->mutable_actions(0)->set_delay_us(std::nan("")); }).ok());
  EXPECT_FALSE(bad([](auto* p) { p->add_resident_at_start(9); }).ok());
  // A FREE's needed_by means nothing and is not checked.
  EXPECT_TRUE(bad([](auto* p) {
                p->mutable_actions(0)->set_kind(schedule::FREE);
                p->mutable_actions(0)->set_needed_by(99);
              }).ok());

  const std::string dir = ::testing::TempDir();
  {
    std::FILE* f = std::fopen((dir + "/plan.pb").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string bytes = good.SerializeAsString();
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  auto loaded = LoadPlan(dir + "/plan.pb", s);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->SerializeAsString(), good.SerializeAsString());
  s.set_name("another");
  EXPECT_EQ(LoadPlan(dir + "/plan.pb", s).status().code(), StatusCode::kInvalidArgument)
      << "a plan for another schedule was taken";
  s.set_name("tiny");
  {
    std::FILE* f = std::fopen((dir + "/plan.json").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"schedule": "tiny", "actions": [{"kind": "PREFETCH", "tensor": 3, )"
               R"("step": 0, "needed_by": 7}]})",
               f);
    std::fclose(f);
  }
  EXPECT_EQ(LoadPlan(dir + "/plan.json", s).status().code(), StatusCode::kInvalidArgument)
      << "a prefetch needed by a step the schedule does not have was taken";
}

}  // namespace
}  // namespace tierpool::prefetch
