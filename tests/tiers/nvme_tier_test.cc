#include "tiers/nvme_tier.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "common/checksum.h"
#include "common/units.h"

namespace tierpool {
namespace {

NvmeTierConfig MemoryConfig() {
  NvmeTierConfig c;
  c.backend = "memory";
  c.capacity = 16 << 20;
  c.files = 2;
  c.io_size = 64 * 1024;
  c.queue_depth = 4;
  c.degrade_after_errors = 2;
  c.retry_degraded_ms = 50;
  return c;
}

std::unique_ptr<NvmeTier> Make(FaultInjectingIoBackend** faults = nullptr) {
  auto c = MemoryConfig();
  auto f = std::make_unique<FaultInjectingIoBackend>(
      std::make_unique<MemoryIoBackend>(IoBackendConfig{.block_size = 4096, .queue_depth = 4},
                                        std::vector<std::uint64_t>(2, 8 << 20)),
      7);
  if (faults != nullptr) *faults = f.get();
  auto t = NvmeTier::Create(c, std::move(f));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

struct Payload {
  AlignedBuffer bytes;
  RecordInfo info;
};

Payload MakePayload(std::uint64_t size, int seed) {
  Payload p{AllocateAligned(AlignUp(size, 4096), 4096), {}};
  for (std::uint64_t i = 0; i < size; ++i) p.bytes.get()[i] = static_cast<std::byte>(i ^ seed);
  p.info = {KeyHash("ns", "k" + std::to_string(seed)), static_cast<std::uint64_t>(seed), size,
            Xxh3(p.bytes.get(), size)};
  return p;
}

TEST(NvmeTier, ValidatesConfig) {
  auto c = MemoryConfig();
  c.backend = "floppy";
  EXPECT_FALSE(c.validate().ok());
  c = MemoryConfig();
  c.io_size = 1000;
  EXPECT_FALSE(c.validate().ok());
  c = MemoryConfig();
  c.backend = "posix";
  c.path = "";
  EXPECT_FALSE(c.validate().ok());
}

TEST(NvmeTier, RecordsRoundTripAndSpreadOverFiles) {
  auto t = Make();
  std::vector<Payload> ps;
  std::vector<Extent> es;
  for (int i = 0; i < 6; ++i) {
    ps.push_back(MakePayload(100000 + 4096 * static_cast<std::uint64_t>(i), i));
    auto e = t->Allocate(ps.back().info.size, {});
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->length, t->RecordBytes(ps.back().info.size));
    ASSERT_TRUE(t->WriteRecord(*e, ps.back().info, ps.back().bytes.get()).ok());
    es.push_back(*e);
  }
  EXPECT_NE(es[0].arena_id, es[1].arena_id);  // most-free file first
  for (int i = 0; i < 6; ++i) {
    auto& p = ps[static_cast<std::size_t>(i)];
    auto dst = AllocateAligned(t->PayloadSpan(p.info.size), 4096);
    ASSERT_TRUE(t->ReadRecord(es[static_cast<std::size_t>(i)], p.info, dst.get()).ok());
    EXPECT_EQ(std::memcmp(dst.get(), p.bytes.get(), p.info.size), 0);
  }
  EXPECT_EQ(t->HostAddress(es[0]), nullptr);
  EXPECT_EQ(t->Stats().state, "ok");
}

TEST(NvmeTier, IndexMixUpsAndCorruptionAreDataLoss) {
  FaultInjectingIoBackend* faults = nullptr;
  auto t = Make(&faults);
  auto p = MakePayload(48 * 1024, 1);  // no padding: any flipped payload bit matters
  auto e = t->Allocate(p.info.size, {});
  ASSERT_TRUE(t->WriteRecord(*e, p.info, p.bytes.get()).ok());
  auto dst = AllocateAligned(t->PayloadSpan(p.info.size), 4096);
  RecordInfo other = p.info;
  other.key_hash ^= 1;  // another object's key
  Status s = t->ReadRecord(*e, other, dst.get());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("another object"), std::string::npos) << s.message();
  faults->AddRule({.kind = FaultKind::kFlipBitRead, .nth = 2});  // op 1 is the header
  EXPECT_EQ(t->ReadRecord(*e, p.info, dst.get()).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(t->ReadRecord(*e, p.info, dst.get()).ok());
  EXPECT_EQ(t->Stats().checksum_failures, 2u);
  EXPECT_EQ(t->Stats().state, "ok");  // bad bytes are counted, not a sick device
}

TEST(NvmeTier, GarbledWriteIsCaughtByVerification) {
  FaultInjectingIoBackend* faults = nullptr;
  auto t = Make(&faults);
  faults->AddRule({.kind = FaultKind::kFlipBitWrite, .nth = 2});  // a payload op
  auto p = MakePayload(200000, 2);
  auto e = t->Allocate(p.info.size, {});
  Status s = t->WriteRecord(*e, p.info, p.bytes.get());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("verifying"), std::string::npos);
}

TEST(NvmeTier, RepeatedErrorsDegradeThenRecover) {
  FaultInjectingIoBackend* faults = nullptr;
  auto t = Make(&faults);
  faults->AddRule({.kind = FaultKind::kEio, .one_in = 1});
  auto p = MakePayload(4096, 3);
  auto e = t->Allocate(4096, {});
  EXPECT_FALSE(t->WriteRecord(*e, p.info, p.bytes.get()).ok());
  EXPECT_TRUE(t->CheckWritable().ok());
  EXPECT_FALSE(t->WriteRecord(*e, p.info, p.bytes.get()).ok());
  EXPECT_EQ(t->CheckWritable().code(), StatusCode::kUnavailable);
  EXPECT_EQ(t->Stats().state, "degraded");
  EXPECT_EQ(t->Stats().write_errors, 2u);
  faults->ClearRules();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  ASSERT_TRUE(t->CheckWritable().ok());  // one more try after the pause
  ASSERT_TRUE(t->WriteRecord(*e, p.info, p.bytes.get()).ok());
  EXPECT_EQ(t->Stats().state, "ok");
}

TEST(NvmeTier, EnospcMarksTheTierFullUntilSomethingIsFreed) {
  FaultInjectingIoBackend* faults = nullptr;
  auto t = Make(&faults);
  faults->AddRule({.kind = FaultKind::kEnospc, .nth = 1});
  auto p = MakePayload(4096, 4);
  auto e = t->Allocate(4096, {});
  EXPECT_EQ(t->WriteRecord(*e, p.info, p.bytes.get()).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(t->Stats().state, "full");
  EXPECT_EQ(t->CheckWritable().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(t->Allocate(4096, {}).ok());
  ASSERT_TRUE(t->Free(*e).ok());
  EXPECT_EQ(t->Stats().state, "ok");
}

}  // namespace
}  // namespace tierpool
