// A get or reserve reply is read only when it answers what was asked (client/reply_shape.h): every
// list of a packed reply one length, the other items exactly at listed positions, all together the
// batch. A server's reply shaped otherwise fails the call instead of being indexed past its end.
#include "client/reply_shape.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace tierpool::detail {
namespace {

// An item in a reply's items at each of `positions`, listed there in its packed results.
template <typename Reply>
void ListPlainAt(const std::vector<std::uint32_t>& positions, Reply* r) {
  for (auto pos : positions) {
    r->mutable_packed()->add_positions(pos);
    r->add_items();
  }
}

// n items: `plain` of them in items at `positions`, the rest packed.
wire::GetReply Packed(int packed, const std::vector<std::uint32_t>& positions) {
  wire::GetReply r;
  auto* p = r.mutable_packed();
  for (int k = 0; k < packed; ++k) {
    p->add_sizes(4096);
    p->add_checksums(1);
    p->add_lease_ids(static_cast<std::uint64_t>(k) + 1);
    p->add_arena_ids(0);
    p->add_offsets(static_cast<std::uint64_t>(k) * 4096);
    p->add_lengths(4096);
  }
  ListPlainAt(positions, &r);
  return r;
}

TEST(GetReplyShape, AnswersOfTheRightShapeAreRead) {
  wire::GetReply plain;
  for (int i = 0; i < 3; ++i) plain.add_items();
  EXPECT_TRUE(GetReplyAnswers(plain, 3));
  EXPECT_TRUE(GetReplyAnswers(Packed(4, {}), 4));
  EXPECT_TRUE(GetReplyAnswers(Packed(2, {0, 3}), 4));
  EXPECT_TRUE(GetReplyAnswers(Packed(0, {0, 1}), 2));  // every item an error
  EXPECT_TRUE(GetReplyAnswers(wire::GetReply(), 0));
}

TEST(GetReplyShape, AnswersOfAnyOtherShapeAreRefused) {
  wire::GetReply plain;
  for (int i = 0; i < 3; ++i) plain.add_items();
  EXPECT_FALSE(GetReplyAnswers(plain, 4));  // one short
  EXPECT_FALSE(GetReplyAnswers(Packed(4, {}), 5));
  EXPECT_FALSE(GetReplyAnswers(Packed(2, {0, 3}), 5));
  EXPECT_FALSE(GetReplyAnswers(Packed(2, {3, 0}), 4));  // not ascending
  EXPECT_FALSE(GetReplyAnswers(Packed(2, {1, 1}), 4));  // the same position twice
  EXPECT_FALSE(GetReplyAnswers(Packed(2, {0, 4}), 4));  // past the batch
  wire::GetReply extra_item = Packed(2, {0});
  extra_item.add_items();  // an item whose position is not listed
  EXPECT_FALSE(GetReplyAnswers(extra_item, 4));
  // One list one entry short.
  const std::vector<std::function<void(wire::PackedGetResults*)>> shorten = {
      [](auto* p) { p->mutable_sizes()->RemoveLast(); },
      [](auto* p) { p->mutable_checksums()->RemoveLast(); },
      [](auto* p) { p->mutable_lease_ids()->RemoveLast(); },
      [](auto* p) { p->mutable_arena_ids()->RemoveLast(); },
      [](auto* p) { p->mutable_offsets()->RemoveLast(); },
      [](auto* p) { p->mutable_lengths()->RemoveLast(); }};
  for (std::size_t list = 0; list < shorten.size(); ++list) {
    wire::GetReply r = Packed(3, {});
    shorten[list](r.mutable_packed());
    EXPECT_FALSE(GetReplyAnswers(r, 3)) << "list " << list;
  }
}

TEST(ReserveReplyShape, OnlyAnswersOfTheRightShapeAreRead) {
  auto rooms = [](int packed, const std::vector<std::uint32_t>& positions) {
    wire::ReserveReply r;
    auto* p = r.mutable_packed();
    for (int k = 0; k < packed; ++k) {
      p->add_reservation_ids(static_cast<std::uint64_t>(k) + 1);
      p->add_arena_ids(0);
      p->add_offsets(static_cast<std::uint64_t>(k) * 4096);
      p->add_lengths(4096);
    }
    ListPlainAt(positions, &r);
    return r;
  };
  EXPECT_TRUE(ReserveReplyAnswers(rooms(3, {}), 3));
  EXPECT_TRUE(ReserveReplyAnswers(rooms(2, {1}), 3));
  EXPECT_TRUE(ReserveReplyAnswers(rooms(0, {0, 1}), 2));
  EXPECT_FALSE(ReserveReplyAnswers(rooms(2, {1}), 4));
  EXPECT_FALSE(ReserveReplyAnswers(rooms(2, {3}), 3));
  EXPECT_FALSE(ReserveReplyAnswers(rooms(1, {1, 0}), 3));
  const std::vector<std::function<void(wire::PackedReserveResults*)>> shorten = {
      [](auto* p) { p->mutable_arena_ids()->RemoveLast(); },
      [](auto* p) { p->mutable_offsets()->RemoveLast(); },
      [](auto* p) { p->mutable_lengths()->RemoveLast(); }};
  for (std::size_t list = 0; list < shorten.size(); ++list) {
    wire::ReserveReply r = rooms(3, {});
    shorten[list](r.mutable_packed());
    EXPECT_FALSE(ReserveReplyAnswers(r, 3)) << "list " << list;
  }
}

}  // namespace
}  // namespace tierpool::detail
