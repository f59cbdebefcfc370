// Writes a seed corpus for each fuzz target: OUT/frames, OUT/plan, OUT/schedule, OUT/onnx,
// OUT/config, OUT/namespace_policy, OUT/peer and OUT/snapshot, each with a few valid inputs that
// reach deep into their decoder.
//   fuzz_seeds OUT
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "prefetch/device_profile.h"
#include "prefetch/planner.h"
#include "prefetch/schedule.h"
#include "proto/peer.pb.h"
#include "store/etcd_wire.h"
#include "store/membership.h"
#include "store/snapshot.h"
#include "tests/fuzz/store_harness.h"
#include "tests/prefetch/random_schedule.h"
#include "transport/framing.h"
#include "transport/peer_auth.h"
#include "transport/peer_wire.h"

namespace {

namespace fs = std::filesystem;
using namespace tierpool;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string Frame(const wire::Request& r) {
  return transport::EncodeFrame(r, transport::kDefaultMaxFrameBytes).value();
}

prefetch::Schedule SmallSchedule() {
  prefetch::Schedule s;
  s.set_format_version(1);
  s.set_name("seed");
  for (int i = 0; i < 4; ++i) {
    auto* st = s.add_steps();
    st->set_name("s" + std::to_string(i));
    st->set_compute_us(100);
  }
  for (int t = 0; t < 3; ++t) {
    auto* x = s.add_tensors();
    x->set_id(static_cast<std::uint32_t>(t));
    x->set_name("t" + std::to_string(t));
    x->set_size_bytes(4096u << t);
    x->set_def_step(t == 0 ? -1 : t - 1);
    x->add_use_steps(3);
  }
  return s;
}

schedule::Plan SmallPlan() {
  schedule::Plan p;
  auto* pre = p.add_actions();
  pre->set_kind(schedule::PREFETCH);
  pre->set_tensor(0);
  pre->set_step(1);
  pre->set_needed_by(3);
  auto* off = p.add_actions();
  off->set_kind(schedule::OFFLOAD);
  off->set_tensor(1);
  off->set_step(1);
  return p;
}

wire::PutSpec Spec(const std::string& key, std::uint64_t size) {
  wire::PutSpec spec;
  spec.set_ns("seed");
  spec.set_key(key);
  spec.set_size(size);
  spec.set_dtype("float32");
  spec.add_shape(static_cast<std::int64_t>(size / 4));
  return spec;
}

void Frames(const fs::path& dir) {
  std::uint64_t id = 1;
  auto req = [&id] {
    wire::Request r;
    r.set_id(id++);
    return r;
  };
  wire::Request hello = req();
  hello.mutable_hello()->set_protocol_version(transport::kProtocolVersion);
  Write(dir, "hello", Frame(hello));

  std::string session = Frame(hello);
  wire::Request put = req();
  auto* item = put.mutable_put_inline()->add_items();
  *item->mutable_spec() = Spec("k", 16);
  item->set_data(std::string(16, 'x'));
  session += Frame(put);
  for (auto mode : {wire::AUTO, wire::PINNED, wire::INLINE, wire::META}) {
    wire::Request get = req();
    auto* k = get.mutable_get()->add_keys();
    k->set_ns("seed");
    k->set_key("k");
    get.mutable_get()->set_mode(mode);
    if (mode == wire::PINNED) get.mutable_get()->set_want_tier(wire::HBM);
    session += Frame(get);
  }
  wire::Request release = req();
  release.mutable_release()->add_lease_ids(1);
  session += Frame(release);
  wire::Request promote = req();
  auto* pk = promote.mutable_promote()->add_keys();
  pk->set_ns("seed");
  pk->set_key("k");
  promote.mutable_promote()->set_target(wire::HBM);
  session += Frame(promote);
  wire::Request list = req();
  list.mutable_list()->set_ns("seed");
  session += Frame(list);
  wire::Request del = req();
  auto* dk = del.mutable_del()->add_keys();
  dk->set_ns("seed");
  dk->set_key("k");
  session += Frame(del);
  wire::Request stat = req();
  stat.mutable_stat()->set_reset_peaks(true);
  session += Frame(stat);
  Write(dir, "session", session);

  std::string two_phase = Frame(hello);
  wire::Request reserve = req();
  *reserve.mutable_reserve()->add_items() = Spec("r", 1 << 16);
  auto hbm = Spec("h", 1 << 12);
  hbm.set_tier_hint(wire::HBM);
  *reserve.mutable_reserve()->add_items() = hbm;
  // Two more, packed in one message.
  auto* packed = reserve.mutable_reserve()->mutable_packed();
  *packed->mutable_spec() = Spec("", 0);
  packed->set_keys("p1p22");
  packed->add_key_bytes(2);
  packed->add_key_bytes(3);
  packed->add_sizes(1 << 12);
  packed->add_sizes(1 << 13);
  reserve.mutable_reserve()->set_packed_results(true);  // the rooms answered in one message
  two_phase += Frame(reserve);
  wire::Request commit = req();
  auto* c = commit.mutable_commit()->add_items();
  c->set_reservation_id(1);
  c->set_checksum(0);
  two_phase += Frame(commit);
  wire::Request abort = req();
  abort.mutable_abort()->add_reservation_ids(2);
  two_phase += Frame(abort);
  Write(dir, "two_phase", two_phase);

  // hbm (1 MiB in the harness) in 128 KiB objects, the even ones pinned and the odd ones deleted
  // but for the fourth: a 256 KiB put into hbm fits by its free bytes (so it runs without
  // waiting, as on an I/O thread), finds no window, and would wait for the fourth's move down:
  // the service stops there and carries the request on (common/no_wait_scope.h), from the
  // batch's second item.
  std::string fragmented = Frame(hello);
  auto hbm_put = [&](const std::string& key, std::uint64_t size) {
    wire::Request r = req();
    auto* it = r.mutable_put_inline()->add_items();
    *it->mutable_spec() = Spec(key, size);
    it->mutable_spec()->set_tier_hint(wire::HBM);
    it->set_data(std::string(size, 'h'));
    return Frame(r);
  };
  for (int i = 0; i < 8; ++i) fragmented += hbm_put("b" + std::to_string(i), 128 << 10);
  wire::Request pins = req();
  pins.mutable_get()->set_mode(wire::PINNED);
  pins.mutable_get()->set_want_tier(wire::HBM);
  pins.mutable_get()->set_bytes_meta_only(true);
  pins.mutable_get()->set_packed_results(true);  // the pins answered in GetReply.packed
  for (int i : {0, 2, 4, 6}) {
    auto* k = pins.mutable_get()->add_keys();
    k->set_ns("seed");
    k->set_key("b" + std::to_string(i));
  }
  fragmented += Frame(pins);
  wire::Request drop = req();
  for (int i : {1, 5, 7}) {
    auto* k = drop.mutable_del()->add_keys();
    k->set_ns("seed");
    k->set_key("b" + std::to_string(i));
  }
  fragmented += Frame(drop);
  // A batch, so that it is carried on from its second item.
  wire::Request batch = req();
  auto* small = batch.mutable_put_inline()->add_items();
  *small->mutable_spec() = Spec("small", 4096);
  small->set_data(std::string(4096, 's'));
  auto* big = batch.mutable_put_inline()->add_items();
  *big->mutable_spec() = Spec("big", 256 << 10);
  big->mutable_spec()->set_tier_hint(wire::HBM);
  big->set_data(std::string(256 << 10, 'b'));
  fragmented += Frame(batch);
  Write(dir, "hbm_fragmented", fragmented);

  wire::Request reg = req();
  auto* rp = reg.mutable_register_plan();
  rp->set_format_version(1);
  rp->set_ns("job");
  SmallSchedule().SerializeToString(rp->mutable_schedule());
  SmallPlan().SerializeToString(rp->mutable_plan());
  rp->set_hbm_budget_bytes(1 << 20);
  wire::Request progress = req();
  progress.mutable_progress()->set_job_id(1);
  progress.mutable_progress()->set_step(1);
  wire::Request unreg = req();
  unreg.mutable_unregister_plan()->set_job_id(1);
  Write(dir, "plan", Frame(reg) + Frame(progress) + Frame(unreg));
}

void Plans(const fs::path& dir) {
  wire::RegisterPlanRequest rp;
  rp.set_format_version(1);
  rp.set_ns("job");
  rp.set_name("seed");
  SmallSchedule().SerializeToString(rp.mutable_schedule());
  SmallPlan().SerializeToString(rp.mutable_plan());
  rp.add_keys("a");
  rp.add_keys("b");
  rp.add_keys("c");
  std::string bytes;
  rp.SerializeToString(&bytes);
  Write(dir, "keys", bytes);
  rp.clear_keys();
  rp.set_hbm_budget_bytes(1 << 19);
  rp.SerializeToString(&bytes);
  Write(dir, "budget", bytes);
}

void Schedules(const fs::path& dir) {
  std::string bytes;
  SmallSchedule().SerializeToString(&bytes);
  Write(dir, "small.pb", bytes);
  Write(dir, "small.json",
        R"({"formatVersion":1,"name":"j","steps":[{"name":"a","computeUs":10},{"name":"b"}],)"
        R"("tensors":[{"id":0,"name":"w","sizeBytes":"64","defStep":-1,"useSteps":[1]}]})");
}

// Plans for the replay target's chain (random_schedule.h, TrainingChain of six layers): the
// planner's own at 75% of its peak (recompute allowed), and a plan of one recompute.
void Replays(const fs::path& dir) {
  const prefetch::Chain chain = prefetch::TrainingChain(6, 1 << 20, 50);
  const prefetch::Lifetimes lt(chain.s);
  const auto d = prefetch::BuiltinProfile("h100").value();
  auto plan = prefetch::BuildPlan(
      chain.s, lt, d,
      {.hbm_budget = static_cast<std::uint64_t>(0.75 * static_cast<double>(lt.peak_bytes())),
       .recompute_share = 0.5});
  std::string bytes;
  if (plan.ok()) {
    plan->SerializeToString(&bytes);
    Write(dir, "planned", bytes);
  }
  schedule::Plan one;
  one.set_schedule(chain.s.name());
  auto* r = one.add_recomputes();
  r->set_tensor(chain.x(1));  // made again at the step before its first backward use
  r->set_at_step(chain.backward(2) - 1);
  one.SerializeToString(&bytes);
  Write(dir, "one-recompute", bytes);
}

void Onnx(const fs::path& dir) {
  onnx::ModelProto model;
  model.set_ir_version(7);
  model.add_opset_import()->set_version(13);
  auto* g = model.mutable_graph();
  g->set_name("seed");
  auto tensor_type = [](onnx::ValueInfoProto* v, const char* name, std::vector<std::int64_t> dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (auto d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  tensor_type(g->add_input(), "x", {2, 4});
  tensor_type(g->add_output(), "z", {2, 3});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(3);
  for (int i = 0; i < 12; ++i) w->add_float_data(0.5f);
  auto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->add_input("x");
  mm->add_input("w");
  mm->add_output("y");
  auto* relu = g->add_node();
  relu->set_op_type("Relu");
  relu->add_input("y");
  relu->add_output("z");
  std::string bytes;
  model.SerializeToString(&bytes);
  Write(dir, "matmul_relu.onnx", bytes);

  // A branch made early and summed late, which the lower-peak reorder moves, and a Shape that
  // import folds (no step): the reorder's matching of steps to nodes has work to do.
  g->clear_node();
  g->clear_initializer();
  g->clear_output();
  tensor_type(g->add_output(), "out", {2, 4});
  auto node = [&](const char* op, std::vector<const char*> in, const char* out) {
    auto* n = g->add_node();
    n->set_name(std::string(op) + "_" + out);
    n->set_op_type(op);
    for (const char* i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  for (const char* out : {"b", "a1"}) {
    auto* axis = node("Concat", {"x", "x", "x", "x"}, out)->add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(1);
  }
  node("Relu", {"a1"}, "a2");
  node("ReduceSum", {"a2"}, "a3");
  node("ReduceSum", {"b"}, "c");
  node("Add", {"a3", "c"}, "y0");
  node("Shape", {"x"}, "sh");
  node("Expand", {"y0", "sh"}, "out");
  model.SerializeToString(&bytes);
  Write(dir, "branch.onnx", bytes);
}

void Configs(const fs::path& dir) {
  Write(dir, "small", "dram = 64M\nhbm = 0\nio-threads = 2\nlog-level = warn\n");
  Write(dir, "limits",
        "max-connections = 16\nmax-connections-per-process = 4\nidle-timeout-ms = 1000\n"
        "lease-ttl-ms = 500\nmax-pins-per-client = 8\ndram-high-watermark = 0.8\n");
}

void NamespacePolicies(const fs::path& dir) {
  Write(dir, "grants", R"({"grants": [{"uid": 1001, "namespaces": ["bob", "bob-*"]},
      {"gid": 100, "namespaces": ["*"]}]})");
  Write(dir, "pools", R"({"grants": [{"uid": 65534, "namespaces": ["bob-*"]}],
      "pools": {"bob": {"namespaces": ["bob", "bob-*"], "dram": "4M", "hbm": 65536},
                "x": {"namespaces": ["x"], "dram": 4096}},
      "quotas": {"bob": {"bytes": "8M", "objects": 10, "hbm": "1M", "dram": 4096, "nvme": 1}}})");
}

std::string PeerFrame(const google::protobuf::MessageLite& m) {
  return transport::EncodeFrame(m, transport::kMaxPeerMessageBytes).value();
}

// The first byte picks who speaks (tests/fuzz/fuzz_peer.cc): 0 a stranger, 1 a listener, 2 an
// authenticated borrower, 3 a member record.
void Peers(const fs::path& dir) {
  wire::peer::ClientHello client;
  client.set_protocol_version(transport::kPeerProtocolVersion);
  client.set_nonce(std::string(transport::kPeerNonceBytes, 'n'));
  client.set_node_id("mallory");
  client.set_incarnation(7);
  client.set_mac(std::string(transport::kPeerMacBytes, 'm'));
  Write(dir, "stranger", std::string(1, '\0') + PeerFrame(client));
  wire::peer::ServerHello hello;
  hello.set_protocol_version(transport::kPeerProtocolVersion);
  hello.set_nonce(std::string(transport::kPeerNonceBytes, 's'));
  hello.set_node_id("lender");
  hello.set_incarnation(9);
  wire::peer::ServerProof proof;
  proof.set_mac(std::string(transport::kPeerMacBytes, 'p'));
  Write(dir, "listener", std::string(1, '\1') + PeerFrame(hello) + PeerFrame(proof));
  // Ids pick the borrower: id % 3 == 0 is a/1, 1 is a/2, 2 is b/3.
  std::string requests(1, '\2');
  auto add = [&](std::uint64_t id, auto fill) {
    wire::peer::Request r;
    r.set_id(id);
    fill(r);
    requests += PeerFrame(r);
  };
  add(0, [](auto& r) { r.mutable_grant()->set_bytes(1 << 20); });
  add(2, [](auto& r) { r.mutable_grant()->set_bytes(8192); });
  add(3, [](auto& r) {
    r.mutable_write()->set_region(1);
    r.mutable_write()->set_offset(4096);
    r.mutable_write()->set_length(4096);
  });
  add(6, [](auto& r) {
    r.mutable_read()->set_region(1);
    r.mutable_read()->set_length(1 << 20);
  });
  add(5, [](auto& r) {
    r.mutable_read()->set_region(2);
    r.mutable_read()->set_offset(8191);
    r.mutable_read()->set_length(1);
  });
  add(1, [](auto& r) { r.mutable_adopt()->set_previous_incarnation(1); });
  add(4, [](auto& r) { r.mutable_info(); });
  add(7, [](auto& r) { r.mutable_release()->set_region(1); });
  add(8, [](auto& r) { r.mutable_release()->set_region(2); });
  Write(dir, "requests", requests);
  Write(dir, "member", "\3" + Membership::Encode({"node-a", 12345, "127.0.0.1:7000", 1 << 30}));
}

void Snapshots(const fs::path& dir) {
  auto& h = fuzz::StoreHarness::Get();
  for (auto [key, size] : std::vector<std::pair<const char*, std::size_t>>{
           {"empty", 0}, {"small", 100}, {"page", 4096}}) {
    PutSpec spec;
    spec.ns = "seed";
    spec.key = key;
    spec.size = size;
    spec.dtype = "float32";
    spec.shape = {static_cast<std::int64_t>(size / 4)};
    std::string bytes(size, 'p');
    if (!h.store->PutCopy(spec, bytes.data(), kStoreOwner).ok()) std::exit(1);
  }
  const fs::path tmp = dir.parent_path() / "snapshot-tmp";
  fs::create_directories(tmp);
  if (!SaveSnapshot(*h.store, tmp.string()).ok()) std::exit(1);
  fs::create_directories(dir);
  fs::rename(tmp / "tierpool.snapshot", dir / "three");
  fs::remove_all(tmp);
  h.Reset();
}

// etcd's gateway answers: the first byte picks the call (its value mod 5), the rest is the body.
void EtcdAnswers(const fs::path& dir) {
  using etcd_wire::Base64;
  const std::string header = R"("header":{"cluster_id":"14841639068965178418","revision":"42"})";
  Write(dir, "grant", "\0{" + header + R"(,"ID":"7587869520421806852","TTL":"5"})");
  Write(dir, "keepalive", "\1{" + header + R"(,"result":{"ID":"7587869520421806852","TTL":"4"}})");
  Write(dir, "put", "\2{" + header + "}");
  Write(dir, "base64", "\2" + Base64("tierpool"));
  const std::string member =
      Membership::Encode({"node-a", 12345, "127.0.0.1:7000", 1 << 30, false});
  Write(dir, "range",
        "\3{" + header + R"(,"kvs":[{"key":")" + Base64("/tierpool/default/members/node-a") +
            R"(","create_revision":"40","mod_revision":"41","version":"2","value":")" +
            Base64(member) + R"(","lease":"7587869520421806852"}],"count":"1"})");
  std::string watch;
  for (int i = 0; i < 4; ++i) {
    watch += R"({"result":{)" + header + R"(,"events":[{)" +
             (i == 2 ? std::string(R"("type":"DELETE",)") : std::string()) + R"("kv":{"key":")" +
             Base64("/tierpool/default/members/node-" + std::to_string(i)) + R"(","value":")" +
             (i == 2 ? std::string() : Base64(member)) + R"(","mod_revision":")" +
             std::to_string(43 + i) + R"("}}]}})" + "\n";
    if (i == 1) watch += "\n";
  }
  watch +=
      R"({"result":{"canceled":true,"cancel_reason":"mvcc: required revision has been compacted"}})"
      "\n";
  Write(dir, "watch", std::string(1, static_cast<char>(4 + 5 * 3)) + watch);  // stops at 4
  Write(dir, "watch_whole", std::string(1, static_cast<char>(4 + 5 * 40)) + watch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT\n");
    return 2;
  }
  const fs::path out = argv[1];
  Frames(out / "frames");
  Plans(out / "plan");
  Schedules(out / "schedule");
  Replays(out / "replay");
  Onnx(out / "onnx");
  Configs(out / "config");
  NamespacePolicies(out / "namespace_policy");
  Peers(out / "peer");
  Snapshots(out / "snapshot");
  EtcdAnswers(out / "etcd");
  return 0;
}
