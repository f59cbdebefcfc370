#include "tiers/io_backend.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "common/checksum.h"
#include "tiers/io_uring_backend.h"

namespace tierpool {
namespace {

constexpr IoBackendConfig kConfig{.block_size = 4096, .queue_depth = 4};

AlignedBuffer Filled(std::uint64_t n, int seed) {
  auto b = AllocateAligned(n, 4096);
  for (std::uint64_t i = 0; i < n; ++i) b.get()[i] = static_cast<std::byte>(i * 7 + seed);
  return b;
}

// Round trip of a batch larger than the queue depth, through whatever backend.
void ExpectRoundTrip(IoBackend& io) {
  constexpr std::uint64_t kLen = 64 * 1024;
  std::vector<AlignedBuffer> out, in;
  std::vector<IoOp> writes, reads;
  for (int i = 0; i < 10; ++i) {
    out.push_back(Filled(kLen, i));
    in.push_back(AllocateAligned(kLen, 4096));
    writes.push_back(
        {.kind = IoOp::Kind::kWrite, .offset = i * kLen, .buf = out.back().get(), .len = kLen});
    reads.push_back(
        {.kind = IoOp::Kind::kRead, .offset = i * kLen, .buf = in.back().get(), .len = kLen});
  }
  ASSERT_TRUE(io.Run(writes).ok());
  ASSERT_TRUE(io.Run(reads).ok());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(std::memcmp(in[static_cast<std::size_t>(i)].get(),
                          out[static_cast<std::size_t>(i)].get(), kLen),
              0)
        << i;
  }
  EXPECT_EQ(io.stats().writes, 10u);
  EXPECT_EQ(io.stats().reads, 10u);
  EXPECT_EQ(io.stats().bytes_read, 10 * kLen);
}

TEST(IoBackend, MemoryRoundTrip) {
  MemoryIoBackend io(kConfig, {1 << 20});
  ExpectRoundTrip(io);
}

TEST(IoBackend, RejectsMisalignedOffsetsAndLengths) {
  MemoryIoBackend io(kConfig, {1 << 20});
  auto b = Filled(8192, 1);
  EXPECT_EQ(io.Write(0, 100, b.get(), 4096).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(io.Write(0, 0, b.get(), 100).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(io.Write(0, 0, b.get(), 0).code(), StatusCode::kInvalidArgument);
}

TEST(IoBackend, UnalignedBuffersGoThroughABounce) {
  MemoryIoBackend io(kConfig, {1 << 20});
  std::vector<std::byte> raw(8192 + 1);
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>(i);
  ASSERT_TRUE(io.Write(0, 4096, raw.data() + 1, 8192).ok());
  std::vector<std::byte> back(8192 + 3);
  ASSERT_TRUE(io.Read(0, 4096, back.data() + 3, 8192).ok());
  EXPECT_EQ(std::memcmp(back.data() + 3, raw.data() + 1, 8192), 0);
  EXPECT_EQ(io.stats().bounced, 2u);
}

TEST(IoBackend, PosixAndIoUringOnARealFile) {
  std::string path = ::testing::TempDir() + "/io_backend_test.dat";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  {
    PosixIoBackend posix(kConfig, {fd});
    ExpectRoundTrip(posix);
  }
  auto ring = IoUringBackend::Create(kConfig, {fd});
  if (!ring.ok()) {
    GTEST_SKIP() << "io_uring unavailable here: " << ring.status().ToString();
  }
  auto b = Filled(1 << 20, 3);
  ASSERT_TRUE((*ring)->RegisterBuffers({{b.get(), 1 << 20}}).ok());
  ExpectRoundTrip(**ring);
  // A fixed-buffer write and read.
  ASSERT_TRUE((*ring)->Write(0, 0, b.get(), 65536).ok());
  auto in = AllocateAligned(65536, 4096);
  ASSERT_TRUE((*ring)->ReadVerified(0, 0, in.get(), 65536, 65536, Xxh3(b.get(), 65536)).ok());
  ::close(fd);
  ::unlink(path.c_str());
}

std::unique_ptr<FaultInjectingIoBackend> Faulty(FaultRule rule) {
  auto f = std::make_unique<FaultInjectingIoBackend>(
      std::make_unique<MemoryIoBackend>(kConfig, std::vector<std::uint64_t>{1 << 20}), 99);
  f->AddRule(rule);
  return f;
}

TEST(FaultInjection, EioOnTheNthCall) {
  auto io = Faulty({.kind = FaultKind::kEio, .nth = 2});
  auto b = Filled(4096, 1);
  EXPECT_TRUE(io->Write(0, 0, b.get(), 4096).ok());
  Status s = io->Write(0, 0, b.get(), 4096);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
  EXPECT_TRUE(io->Write(0, 0, b.get(), 4096).ok());
  EXPECT_EQ(io->injected(), 1u);
  EXPECT_EQ(io->stats().errors, 1u);
}

TEST(FaultInjection, EnospcIsResourceExhausted) {
  auto io = Faulty({.kind = FaultKind::kEnospc, .one_in = 1});
  auto b = Filled(4096, 1);
  EXPECT_EQ(io->Write(0, 0, b.get(), 4096).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(io->Read(0, 0, b.get(), 4096).ok());  // reads are unaffected
}

TEST(FaultInjection, ShortTransfersAreRetriedToCompletion) {
  auto io = Faulty({.kind = FaultKind::kShortWrite, .nth = 1});
  io->AddRule({.kind = FaultKind::kShortRead, .nth = 1});
  auto b = Filled(65536, 5);
  ASSERT_TRUE(io->Write(0, 0, b.get(), 65536).ok());
  auto in = AllocateAligned(65536, 4096);
  ASSERT_TRUE(io->Read(0, 0, in.get(), 65536).ok());
  EXPECT_EQ(std::memcmp(in.get(), b.get(), 65536), 0);
  EXPECT_EQ(io->stats().short_transfers, 2u);
}

TEST(FaultInjection, ShortTransferWithNoProgressFails) {
  auto io = Faulty({.kind = FaultKind::kShortWrite, .one_in = 1});
  auto b = Filled(4096, 5);  // half of one block rounds to zero: no progress
  EXPECT_EQ(io->Write(0, 0, b.get(), 4096).code(), StatusCode::kIoError);
}

TEST(FaultInjection, FlippedBitsAreCaughtByTheChecksum) {
  auto io = Faulty({.kind = FaultKind::kFlipBitRead, .nth = 1});
  auto b = Filled(8192, 9);
  ASSERT_TRUE(io->Write(0, 0, b.get(), 8192).ok());
  auto in = AllocateAligned(8192, 4096);
  std::uint64_t sum = Xxh3(b.get(), 8192);
  EXPECT_EQ(io->ReadVerified(0, 0, in.get(), 8192, 8192, sum).code(), StatusCode::kDataLoss);
  EXPECT_TRUE(io->ReadVerified(0, 0, in.get(), 8192, 8192, sum).ok());  // transient
  EXPECT_EQ(io->stats().checksum_failures, 1u);

  auto w = Faulty({.kind = FaultKind::kFlipBitWrite, .nth = 1});
  ASSERT_TRUE(w->Write(0, 0, b.get(), 8192).ok());  // the device took it, garbled
  EXPECT_EQ(w->ReadVerified(0, 0, in.get(), 8192, 8192, sum).code(), StatusCode::kDataLoss);
  EXPECT_EQ(std::memcmp(b.get(), Filled(8192, 9).get(), 8192), 0);  // caller's bytes untouched
}

TEST(FaultInjection, AddedLatency) {
  auto io = Faulty({.kind = FaultKind::kLatency, .one_in = 1, .latency_us = 20000});
  auto b = Filled(4096, 1);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(io->Write(0, 0, b.get(), 4096).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
}

}  // namespace
}  // namespace tierpool
