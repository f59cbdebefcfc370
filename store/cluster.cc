#include "store/cluster.h"

#include <unistd.h>

#include <map>

#include <spdlog/spdlog.h>

#include "common/units.h"

namespace tierpool {

namespace {

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// The peer protocol of a node that lends nothing: info answers, everything else is refused.
class NoLending final : public transport::PeerHandler {
 public:
  void Handle(const transport::PeerIdentity&, const wire::peer::Request& request,
              wire::peer::Response* response) override {
    if (request.op_case() == wire::peer::Request::kInfo) return;
    response->set_code(static_cast<std::uint32_t>(StatusCode::kResourceExhausted));
    response->set_message("this node lends nothing (--lend 0)");
  }
  Result<transport::PeerTransfer> BeginTransfer(const transport::PeerIdentity&,
                                                const wire::peer::RegionRange&, bool,
                                                transport::TransferStop) override {
    return Status::NotFound("this node lends nothing (--lend 0)");
  }
  void FillRoom(const transport::PeerIdentity&, wire::peer::Response*) override {}
};

}  // namespace

Status ClusterConfig::validate() const {
  if (!enabled()) return Status::Ok();
  if (peer_listen.empty()) return Status::InvalidArgument("--etcd needs --peer-listen host:port");
  if (peer_auth.empty()) {
    return Status::InvalidArgument("--etcd needs --peer-auth FILE: peers must authenticate");
  }
  if (remote.replicas > 0) TIERPOOL_RETURN_IF_ERROR(remote.validate());
  if (lend_bytes > 0) {
    LenderConfig l = lender;
    l.lend_bytes = lend_bytes;
    TIERPOOL_RETURN_IF_ERROR(l.validate());
  }
  return peer_server.validate();
}

Result<std::unique_ptr<Cluster>> Cluster::Create(ClusterConfig config) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  if (config.node_id.empty()) config.node_id = HostName();
  if (config.peer_advertise.empty()) config.peer_advertise = config.peer_listen;
  auto auth = transport::PeerAuth::Load(config.peer_auth);
  if (!auth.ok()) return auth.status();
  std::unique_ptr<Cluster> c(new Cluster(std::move(config)));
  const transport::PeerIdentity self{c->config_.node_id, transport::RandomIncarnation()};
  transport::PeerHandler* handler = nullptr;
  if (c->config_.lend_bytes > 0) {
    LenderConfig l = c->config_.lender;
    l.lend_bytes = c->config_.lend_bytes;
    l.grants_wait_for_members = true;  // the membership's first word sets the shares
    auto lender = Lender::Create(l);
    if (!lender.ok()) return lender.status();
    c->lender_ = std::move(lender).value();
    handler = c->lender_.get();
  } else {
    c->no_lending_ = std::make_unique<NoLending>();
    handler = c->no_lending_.get();
  }
  transport::PeerServerConfig server = c->config_.peer_server;
  server.listen = c->config_.peer_listen;
  c->server_ = std::make_unique<transport::PeerServer>(server, *auth, self, handler);
  if (c->config_.remote.replicas > 0) {
    c->remote_owned_ = std::make_unique<RemoteTier>(c->config_.remote, *auth, self);
    c->remote_ = c->remote_owned_.get();
  }
  // Checked now; built for real in Start, once the peer port is known.
  TIERPOOL_RETURN_IF_ERROR(c->MembershipConfigFor(c->config_.peer_advertise).validate());
  return c;
}

MembershipConfig Cluster::MembershipConfigFor(const std::string& advertise) const {
  MembershipConfig m;
  m.etcd = config_.etcd;
  m.cluster = config_.cluster;
  m.node_id = config_.node_id;
  m.peer_address = advertise;
  m.lend_bytes = config_.lend_bytes;
  m.borrows = config_.remote.replicas > 0;
  m.ttl_s = config_.member_ttl_s;
  m.incarnation = server_ ? server_->self().incarnation : 0;
  return m;
}

MembershipCallbacks Cluster::Callbacks() {
  MembershipCallbacks callbacks;
  callbacks.members = [this](const std::vector<RemoteMember>& members) {
    if (remote_ != nullptr) remote_->SetMembers(members);
    if (lender_) {
      std::map<std::string, std::uint64_t> live;
      for (const auto& m : members) {
        // The borrowers: a lender keeps no part for itself or for a node that borrows nothing.
        if (m.node_id != config_.node_id && m.borrows) live[m.node_id] = m.incarnation;
      }
      lender_->SetLiveBorrowers(live);
    }
  };
  // What it lends stays: its borrowers judge it by the peer link, and still use it.
  callbacks.lost = [this] {
    if (remote_ != nullptr) remote_->Suspect();
  };
  return callbacks;
}

Cluster::~Cluster() { Stop(); }

Status Cluster::Start() {
  TIERPOOL_RETURN_IF_ERROR(server_->Start());
  // Port 0 picked one: advertise the one bound.
  std::string advertise = config_.peer_advertise;
  if (advertise.size() >= 2 && advertise.compare(advertise.size() - 2, 2, ":0") == 0) {
    advertise = advertise.substr(0, advertise.size() - 1) + std::to_string(server_->port());
  }
  auto membership = Membership::Create(MembershipConfigFor(advertise), Callbacks());
  if (!membership.ok()) {
    server_->Stop();
    return membership.status();
  }
  membership_ = std::move(membership).value();
  if (Status s = membership_->Start(); !s.ok()) {
    server_->Stop();
    return s;
  }
  spdlog::info("peers reach this node at {}", advertise);
  if (lender_) {
    spdlog::info(
        "lending {}; {:.0f}% of it kept in even parts for the other nodes that borrow "
        "(--lend-reserved-share)",
        FormatBytes(config_.lend_bytes), config_.lender.reserved_share * 100);
  }
  return Status::Ok();
}

void Cluster::Stop() {
  if (membership_) membership_->Stop();
  if (server_) server_->Stop();
}

std::uint64_t Cluster::incarnation() const { return server_->self().incarnation; }

std::vector<RemoteMember> Cluster::Members() const {
  return membership_ ? membership_->Members() : std::vector<RemoteMember>{};
}

void Cluster::VisitCounters(
    const std::function<void(const std::string&, std::uint64_t)>& visit) const {
  const auto members = Members();
  visit("cluster_members", members.size());
  const auto server = server_->counters();
  visit("peer_connections", server.connections);
  visit("peer_auth_failures", server.auth_failures);
  visit("peer_timeouts", server.timed_out);
  visit("peer_connections_refused", server.refused);
  visit("peer_requests", server.requests);
  visit("peer_bytes_in", server.bytes_in);
  visit("peer_bytes_out", server.bytes_out);
  visit("peer_ucx_requests", server.ucx_requests);
  visit("peer_ucx_refused", server.ucx_refused);
  visit("peer_ucx_in_bytes", server.ucx_bytes_in);
  visit("peer_ucx_out_bytes", server.ucx_bytes_out);
  if (lender_) {
    const LenderStats l = lender_->stats();
    visit("lend_capacity_bytes", l.capacity);
    visit("lent_bytes", l.granted_bytes);
    visit("lent_regions", l.regions);
    visit("lent_borrowers", l.borrowers);
    visit("lend_stale_refusals", l.stale_refusals);
    visit("lend_regions_reclaimed", l.regions_reclaimed);
    visit("lend_regions_adopted", l.regions_adopted);
    visit("lend_regions_released_unknown", l.regions_released_unknown);
    visit("lend_share_refusals", l.share_refusals);
    visit("lend_unmet_grants", l.unmet_grants);
    visit("lend_fenced_writes", l.fenced_writes);
    visit("lend_borrowing_members", l.borrowing_members);
  }
  if (remote_ != nullptr) {
    const RemoteTierCounters r = remote_->counters();
    std::uint64_t responsive = 0;
    const auto peers = remote_->Peers();
    for (const auto& p : peers) responsive += p.responsive ? 1 : 0;
    visit("remote_peers", peers.size());
    visit("remote_peers_responsive", responsive);
    visit("remote_peers_lost", r.peers_lost);
    visit("remote_replicas_lost", r.replicas_lost);
    visit("remote_replicas_repaired", r.replicas_repaired);
    visit("remote_repair_bytes", r.repair_bytes);
    visit("remote_replicas_corrupt", r.replicas_corrupt);
    visit("remote_ranges_fenced", r.ranges_fenced);
    visit("remote_regions_given_back", r.regions_given_back);
    visit("remote_extents_lost", r.extents_lost);
    visit("remote_read_failovers", r.read_failovers);
    visit("remote_grants", r.grants);
    visit("remote_grant_failures", r.grant_failures);
    visit("remote_peers_lost_silent", r.peers_lost_silent);
    visit("remote_objects_under_replicated", r.under_replicated);
    visit("remote_regions_lost", r.regions_lost);
    std::uint64_t over_ucx = 0;
    for (const auto& p : peers) over_ucx += p.transport == "ucx" ? 1 : 0;
    visit("remote_peers_ucx", over_ucx);
    visit("remote_ucx_written_bytes", r.ucx_bytes_written);
    visit("remote_ucx_read_bytes", r.ucx_bytes_read);
  }
}

void Cluster::FillMembers(wire::StatReply* reply) const {
  std::map<std::string, RemotePeerInfo> borrowed;
  if (remote_ != nullptr) {
    for (auto& p : remote_->Peers()) borrowed[p.member.node_id] = p;
  }
  for (const RemoteMember& m : Members()) {
    auto* w = reply->add_members();
    w->set_node_id(m.node_id);
    w->set_incarnation(m.incarnation);
    w->set_peer_address(m.address);
    w->set_lend_bytes(m.lend_bytes);
    w->set_self(m.node_id == config_.node_id);
    w->set_responsive(true);
    if (w->self() && lender_) {
      const LenderStats l = lender_->stats();
      w->set_lend_free(l.capacity - l.granted_bytes);
    }
    auto it = borrowed.find(m.node_id);
    if (it != borrowed.end()) {
      w->set_lend_free(it->second.lend_free);
      w->set_granted_to_us(it->second.granted_bytes);
      w->set_used_by_us(it->second.used_bytes);
      w->set_responsive(it->second.responsive);
      w->set_failures(it->second.failures);
      w->set_transport(it->second.transport);
    }
  }
}

}  // namespace tierpool
