// Batch items packed in one message (docs/protocol.md). Puts (ReserveRequest.packed): reserved
// in order after the request's other items, each under its own key and size; lists that
// disagree, a batch over the limit, bad enums and a bad key are refused with a clear error, and
// the service goes on. Get keys (GetRequest.packed_keys): answered in order after the plain
// keys; lengths that do not add up and a batch over the limit are refused whole. Get results
// (GetRequest.packed_results): the pinned ones packed, the rest listed by position.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "store/object_store.h"
#include "store/service.h"
#include "tiers/dram_tier.h"

namespace tierpool {
namespace {

constexpr std::uint64_t kOwner = 3;

std::unique_ptr<ObjectStore> MakeStore() {
  std::vector<std::unique_ptr<Tier>> tiers;
  auto d = DramTier::Create({.capacity = 8 << 20, .populate = false});
  EXPECT_TRUE(d.ok());
  tiers.push_back(std::move(d).value());
  auto s = ObjectStore::Create({}, std::move(tiers));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

// A reserve of one plain item, then `keys` packed with the given sizes.
wire::Request Reserve(const std::vector<std::string>& keys,
                      const std::vector<std::uint64_t>& sizes) {
  wire::Request req;
  req.set_id(9);
  auto* plain = req.mutable_reserve()->add_items();
  plain->set_ns("ns");
  plain->set_key("plain");
  plain->set_size(100);
  auto* packed = req.mutable_reserve()->mutable_packed();
  packed->mutable_spec()->set_ns("ns");
  packed->mutable_spec()->set_durability(wire::RETAINED);  // the plain item: cache (unset)
  for (const auto& k : keys) {
    packed->mutable_keys()->append(k);
    packed->add_key_bytes(static_cast<std::uint32_t>(k.size()));
  }
  for (auto n : sizes) packed->add_sizes(n);
  return req;
}

class PackedItems : public ::testing::Test {
 protected:
  wire::Response Handle(const wire::Request& req) {
    wire::Response resp;
    std::vector<int> fds;
    service_.Handle(kOwner, peer_, req, &resp, &fds);
    return resp;
  }
  // The whole request refused, with a message that says `why`.
  void ExpectRefused(const wire::Request& req, const std::string& why) {
    const wire::Response resp = Handle(req);
    EXPECT_EQ(resp.status().code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
    EXPECT_NE(resp.status().message().find(why), std::string::npos) << resp.status().message();
    EXPECT_EQ(resp.reserve().items_size(), 0);
    EXPECT_EQ(store_->Stats().reservations_open, 0u) << "a refused request reserved something";
  }

  std::unique_ptr<ObjectStore> store_ = MakeStore();
  StoreService service_{ServiceConfig{.max_batch_items = 8}, store_.get()};
  transport::PeerCredentials peer_{.pid = getpid(), .uid = getuid(), .gid = getgid()};
};

TEST_F(PackedItems, AreReservedInOrderAfterThePlainItemsEachWithItsKeyAndSize) {
  const wire::Response resp = Handle(Reserve({"a", "bb", "", "dddd"}, {4096, 1, 10, 8192}));
  ASSERT_EQ(resp.status().code(), 0u) << resp.status().message();
  ASSERT_EQ(resp.reserve().items_size(), 5);
  const std::vector<std::uint64_t> lengths = {4096, 4096, 4096, 0, 8192};  // page-rounded
  for (int i = 0; i < 5; ++i) {
    const auto& item = resp.reserve().items(i);
    if (i == 3) {  // the empty key
      EXPECT_EQ(item.status().code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
      continue;
    }
    EXPECT_EQ(item.status().code(), 0u) << i << ": " << item.status().message();
    EXPECT_GE(item.extent().length(), lengths[static_cast<std::size_t>(i)]) << i;
  }
  // Each committed under its own name, with its own size and the shared durability.
  const std::vector<std::pair<std::string, std::uint64_t>> names = {
      {"plain", 100}, {"a", 4096}, {"bb", 1}, {"dddd", 8192}};
  const int reply_index[] = {0, 1, 2, 4};
  for (int n = 0; n < 4; ++n) {
    const auto& item = resp.reserve().items(reply_index[n]);
    ASSERT_TRUE(store_->Commit(item.reservation_id(), 0, kOwner).ok());
    auto meta = store_->Head("ns", names[static_cast<std::size_t>(n)].first);
    ASSERT_TRUE(meta.ok()) << names[static_cast<std::size_t>(n)].first;
    EXPECT_EQ(meta->size, names[static_cast<std::size_t>(n)].second);
    EXPECT_EQ(meta->durability, n == 0 ? Durability::kCache : Durability::kRetained);
  }
}

TEST_F(PackedItems, ListsThatDisagreeAreRefusedWhole) {
  ExpectRefused(Reserve({"a", "b"}, {1}), "2 key lengths for 1 sizes");
  wire::Request longer = Reserve({"a", "b"}, {1, 1});
  longer.mutable_reserve()->mutable_packed()->mutable_keys()->append("extra");
  ExpectRefused(longer, "key lengths add up to 2 bytes, the keys are 7");
  wire::Request shorter = Reserve({"a", "b"}, {1, 1});
  shorter.mutable_reserve()->mutable_packed()->set_key_bytes(1, 4'000'000'000u);
  ExpectRefused(shorter, "key lengths add up to 4000000001 bytes, the keys are 2");
}

TEST_F(PackedItems, CountAgainstTheBatchLimitWithThePlainItems) {
  // One plain item and eight packed: nine, over the limit of eight.
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("k" + std::to_string(i));
  ExpectRefused(Reserve(keys, std::vector<std::uint64_t>(8, 1)), "batch of 9 items");
  keys.pop_back();
  const wire::Response resp = Handle(Reserve(keys, std::vector<std::uint64_t>(7, 1)));
  EXPECT_EQ(resp.status().code(), 0u) << resp.status().message();
  EXPECT_EQ(resp.reserve().items_size(), 8);
}

TEST_F(PackedItems, ABadSharedSpecFailsEachPackedItemAndNotThePlainOne) {
  wire::Request req = Reserve({"a", "b"}, {1, 1});
  req.mutable_reserve()->mutable_packed()->mutable_spec()->set_durability(
      static_cast<wire::Durability>(77));
  const wire::Response resp = Handle(req);
  ASSERT_EQ(resp.status().code(), 0u);
  ASSERT_EQ(resp.reserve().items_size(), 3);
  EXPECT_EQ(resp.reserve().items(0).status().code(), 0u);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(resp.reserve().items(i).status().code(),
              static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
    EXPECT_EQ(resp.reserve().items(i).status().message(), "unknown durability class");
  }
}

// A get of one plain key, then `keys` packed, INLINE.
wire::Request Get(const std::vector<std::string>& keys) {
  wire::Request req;
  req.set_id(10);
  req.mutable_get()->set_mode(wire::INLINE);
  auto* plain = req.mutable_get()->add_keys();
  plain->set_ns("ns");
  plain->set_key("plain");
  auto* packed = req.mutable_get()->mutable_packed_keys();
  packed->set_ns("ns");
  for (const auto& k : keys) {
    packed->mutable_keys()->append(k);
    packed->add_key_bytes(static_cast<std::uint32_t>(k.size()));
  }
  return req;
}

TEST_F(PackedItems, PackedGetKeysAreAnsweredInOrderAfterThePlainOnes) {
  for (const std::string key : {"plain", "a", "bb"}) {
    PutSpec spec;
    spec.ns = "ns";
    spec.key = key;
    spec.size = key.size() + 10;
    const std::string bytes(spec.size, key[0]);
    ASSERT_TRUE(store_->PutCopy(spec, bytes.data(), kOwner).ok());
  }
  const wire::Response resp = Handle(Get({"bb", "missing", "a"}));
  ASSERT_EQ(resp.status().code(), 0u) << resp.status().message();
  ASSERT_EQ(resp.get().items_size(), 4);
  EXPECT_EQ(resp.get().items(0).data(), std::string(15, 'p'));
  EXPECT_EQ(resp.get().items(1).data(), std::string(12, 'b'));
  EXPECT_EQ(resp.get().items(2).status().code(), static_cast<std::uint32_t>(StatusCode::kNotFound));
  EXPECT_EQ(resp.get().items(3).data(), std::string(11, 'a'));
}

TEST_F(PackedItems, PackedGetKeysThatDoNotAddUpOrPassTheLimitAreRefusedWhole) {
  wire::Request bad = Get({"a", "b"});
  bad.mutable_get()->mutable_packed_keys()->set_key_bytes(0, 7);
  wire::Response resp = Handle(bad);
  EXPECT_EQ(resp.status().code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
  EXPECT_EQ(resp.status().message(), "packed keys: key lengths add up to 8 bytes, the keys are 2");
  EXPECT_EQ(resp.get().items_size(), 0);
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("k" + std::to_string(i));
  resp = Handle(Get(keys));  // nine with the plain key, over the limit of eight
  EXPECT_EQ(resp.status().code(), static_cast<std::uint32_t>(StatusCode::kInvalidArgument));
  EXPECT_NE(resp.status().message().find("batch of 9 items"), std::string::npos);
}

// With packed_results, the items answered by a pin come in GetReply.packed, the others (bytes in
// the frame, errors) in items at the listed positions; each pinned item's size, checksum, lease
// and extent are those of the object, and its pin is held until released.
TEST_F(PackedItems, PinnedGetResultsArePackedAndTheOthersListedByPosition) {
  const std::vector<std::string> keys = {"a", "missing", "b", "c", "gone", "d"};
  std::map<std::string, std::string> bytes;
  for (const std::string key : {"a", "b", "c", "d"}) {
    PutSpec spec;
    spec.ns = "ns";
    spec.key = key;
    spec.size = 4096;
    bytes[key] = std::string(spec.size, key[0]);
    ASSERT_TRUE(store_->PutCopy(spec, bytes[key].data(), kOwner).ok());
  }
  wire::Request req;
  req.set_id(11);
  auto* get = req.mutable_get();
  get->set_mode(wire::AUTO);  // the first 8 KiB come in the frame: a and b
  get->set_bytes_meta_only(true);
  get->set_packed_results(true);
  for (const auto& k : keys) {
    auto* key = get->add_keys();
    key->set_ns("ns");
    key->set_key(k);
  }
  const wire::Response resp = Handle(req);
  ASSERT_EQ(resp.status().code(), 0u) << resp.status().message();
  const wire::GetReply& reply = resp.get();
  const wire::PackedGetResults& pins = reply.packed();
  ASSERT_EQ(reply.items_size(), 4);
  EXPECT_EQ(std::vector<std::uint32_t>(pins.positions().begin(), pins.positions().end()),
            (std::vector<std::uint32_t>{0, 1, 2, 4}));
  EXPECT_EQ(reply.items(0).data(), bytes["a"]);
  EXPECT_EQ(reply.items(1).status().code(), static_cast<std::uint32_t>(StatusCode::kNotFound));
  EXPECT_EQ(reply.items(2).data(), bytes["b"]);
  EXPECT_EQ(reply.items(3).status().code(), static_cast<std::uint32_t>(StatusCode::kNotFound));
  ASSERT_EQ(pins.sizes_size(), 2);
  ASSERT_EQ(pins.checksums_size(), 2);
  ASSERT_EQ(pins.lease_ids_size(), 2);
  ASSERT_EQ(pins.arena_ids_size(), 2);
  ASSERT_EQ(pins.offsets_size(), 2);
  ASSERT_EQ(pins.lengths_size(), 2);
  EXPECT_EQ(store_->Stats().leases_open, 2u);
  for (int k = 0; k < 2; ++k) {
    const std::string& key = keys[k == 0 ? 3 : 5];
    auto meta = store_->Head("ns", key);
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(pins.sizes(k), 4096u) << key;
    EXPECT_EQ(pins.checksums(k), meta->checksum) << key;
    EXPECT_GE(pins.lengths(k), 4096u) << key;
    EXPECT_NE(pins.lease_ids(k), 0u) << key;
    EXPECT_TRUE(store_->Release(pins.lease_ids(k), kOwner).ok()) << key;
  }
  EXPECT_NE(pins.offsets(0), pins.offsets(1));
  EXPECT_EQ(store_->Stats().leases_open, 0u);
  // Without packed_results, or with the whole meta asked for, every item is in items.
  for (bool whole_meta : {false, true}) {
    get->set_packed_results(whole_meta);
    get->set_bytes_meta_only(!whole_meta);
    const wire::Response plain = Handle(req);
    EXPECT_EQ(plain.get().items_size(), 6);
    EXPECT_FALSE(plain.get().has_packed());
    for (const auto& item : plain.get().items()) {
      if (item.lease_id() != 0) {
        ASSERT_TRUE(store_->Release(item.lease_id(), kOwner).ok());
      }
    }
  }
}

}  // namespace
}  // namespace tierpool
