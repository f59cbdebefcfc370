// The server's own work per batch of small objects, without the socket: a request parsed from
// its bytes into the session's arena (transport/message_arena.h, as unix_session.cc does), handled
// by StoreService, the reply serialized. Puts are a batch of 64 x 4 KiB reserved and committed over
// keys that exist (a KV-cache offload rewrites its blocks); gets pin the 64 and release them;
// each alone in the store (/0) and beside 100,000 other objects (/100000). The reference in the
// same run is the same number of 4 KiB entries written into and read from a
// std::unordered_map<std::string, std::string>, the least a server that keeps its own copies must
// do (Redis does that and more). Run: build/ci/benchmarks/service_bench
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/checksum.h"
#include "store/object_store.h"
#include "store/service.h"
#include "tiers/dram_tier.h"
#include "transport/message_arena.h"

namespace tierpool {
namespace {

constexpr int kBatch = 64;
constexpr std::uint64_t kSize = 4096;
constexpr std::uint64_t kSession = 11;

struct Server {
  std::unique_ptr<ObjectStore> store;
  std::unique_ptr<StoreService> service;
  transport::PeerCredentials peer;
  transport::MessageArena messages;  // as a session keeps its own
  std::string frame;
  std::vector<int> fds;

  Server() {
    std::vector<std::unique_ptr<Tier>> tiers;
    auto d = DramTier::Create({.capacity = 64 << 20, .populate = true});
    if (!d.ok()) std::abort();
    tiers.push_back(std::move(d).value());
    auto s = ObjectStore::Create({}, std::move(tiers));
    if (!s.ok()) std::abort();
    store = std::move(s).value();
    service = std::make_unique<StoreService>(ServiceConfig{}, store.get());
  }

  // One request through the server as its bytes arrive and its reply leaves; the reply lasts
  // until the next call.
  const wire::Response& Call(const std::string& bytes) {
    messages.Reset();
    fds.clear();
    messages.request().ParseFromString(bytes);
    service->Handle(kSession, peer, messages.request(), &messages.response(), &fds);
    messages.response().SerializeToString(&frame);
    return messages.response();
  }
};

std::string Key(int i) { return "bench-batch-0-" + std::to_string(i); }

// One 4 KiB KV block of the batch, as a client's reserve names it.
void AddReserveItem(wire::Request* req, const std::string& key) {
  auto* s = req->mutable_reserve()->add_items();
  s->set_ns("default");
  s->set_key(key);
  s->set_size(kSize);
  s->set_kind(wire::KV_BLOCK);
  s->set_durability(wire::CACHE);
}

std::string ReserveBytes() {
  wire::Request req;
  for (int i = 0; i < kBatch; ++i) AddReserveItem(&req, Key(i));
  return req.SerializeAsString();
}

// Empty objects the index holds besides the batch's (they take no room): a server with many
// objects has deeper maps and sets to keep.
void AddResident(Server& server, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) {
    if (!server.store
             ->PutCopy({.ns = "default", .key = "resident-" + std::to_string(i)}, nullptr, 0)
             .ok()) {
      std::abort();
    }
  }
}

// Commits every reservation of a reserve's reply with `sum` (the request and its bytes reused
// across iterations); false if any commit failed.
bool CommitReserved(Server& server, const wire::Response& reserved, std::uint64_t sum,
                    wire::Request* commit, std::string* commit_bytes) {
  commit->Clear();
  for (const auto& item : reserved.reserve().items()) {
    auto* c = commit->mutable_commit()->add_items();
    c->set_reservation_id(item.reservation_id());
    c->set_checksum(sum);
  }
  commit->SerializeToString(commit_bytes);
  const auto& c = server.Call(*commit_bytes);
  return c.statuses().items_size() == kBatch && c.statuses().items(0).code() == 0;
}

// Reserve and commit 64 over existing keys: what PutBatch asks of the server.
void BM_ServicePutBatch(benchmark::State& state) {
  Server server;
  AddResident(server, state.range(0));
  const std::string reserve = ReserveBytes();
  const std::uint64_t sum = Xxh3(std::string(kSize, 'x').data(), kSize);
  wire::Request commit;
  std::string commit_bytes;
  for (auto _ : state) {
    if (!CommitReserved(server, server.Call(reserve), sum, &commit, &commit_bytes)) {
      state.SkipWithError("commit failed");
      return;
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_ServicePutBatch)->Arg(0)->Arg(100'000);

// Reserve and commit 64 under names the store has never held, then delete them: a KV cache
// that writes new blocks and drops old ones inserts and erases names rather than replacing.
void BM_ServicePutNewBatchThenDelete(benchmark::State& state) {
  Server server;
  AddResident(server, state.range(0));
  const std::uint64_t sum = Xxh3(std::string(kSize, 'x').data(), kSize);
  wire::Request reserve, commit, del;
  std::string reserve_bytes, commit_bytes, del_bytes;
  std::uint64_t next = 0;
  for (auto _ : state) {
    state.PauseTiming();
    reserve.Clear();
    del.Clear();
    for (int i = 0; i < kBatch; ++i, ++next) {
      const std::string key = "bench-new-" + std::to_string(next);
      AddReserveItem(&reserve, key);
      auto* k = del.mutable_del()->add_keys();
      k->set_ns("default");
      k->set_key(key);
    }
    reserve.SerializeToString(&reserve_bytes);
    del.SerializeToString(&del_bytes);
    state.ResumeTiming();
    if (!CommitReserved(server, server.Call(reserve_bytes), sum, &commit, &commit_bytes)) {
      state.SkipWithError("commit failed");
      return;
    }
    server.Call(del_bytes);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_ServicePutNewBatchThenDelete)->Arg(0)->Arg(100'000);

// Pin 64 (AUTO: pinned above the inline threshold's first bytes) and release them.
void BM_ServiceGetBatch(benchmark::State& state) {
  Server server;
  AddResident(server, state.range(0));
  std::string sum_src(kSize, 'x');
  for (int i = 0; i < kBatch; ++i) {
    if (!server.store->PutCopy({.ns = "default", .key = Key(i), .size = kSize}, sum_src.data(), 0)
             .ok()) {
      std::abort();
    }
  }
  wire::Request get;
  for (int i = 0; i < kBatch; ++i) {
    auto* k = get.mutable_get()->add_keys();
    k->set_ns("default");
    k->set_key(Key(i));
  }
  get.mutable_get()->set_mode(wire::AUTO);
  const std::string get_bytes = get.SerializeAsString();
  wire::Request release;
  std::string release_bytes;
  for (auto _ : state) {
    const auto& r = server.Call(get_bytes);
    release.Clear();
    for (const auto& item : r.get().items()) {
      if (item.lease_id() != 0) release.mutable_release()->add_lease_ids(item.lease_id());
    }
    release.SerializeToString(&release_bytes);
    server.Call(release_bytes);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_ServiceGetBatch)->Arg(0)->Arg(100'000);

// The reference: 64 entries of 4 KiB replaced in and read back from a hash map of strings.
void BM_HashMapOfStrings(benchmark::State& state) {
  std::unordered_map<std::string, std::string> map;
  std::vector<std::string> keys;
  for (int i = 0; i < kBatch; ++i) keys.push_back(Key(i));
  const std::string value(kSize, 'x');
  std::string out;
  for (auto _ : state) {
    for (const auto& k : keys) map[k] = std::string(value);
    for (const auto& k : keys) {
      out.assign(map.find(k)->second);
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_HashMapOfStrings);

}  // namespace
}  // namespace tierpool

BENCHMARK_MAIN();
