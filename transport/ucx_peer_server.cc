#include "transport/ucx_peer_server.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "common/logging.h"
#include "transport/ucx_wire.h"

namespace tierpool::transport {

// A write being received into its region, or a read's bytes being sent from it: the handler's
// hold keeps the region from being freed or fenced past it until UCX is done with its bytes.
struct UcxPeerServer::Transfer {
  UcxPeerServer* server = nullptr;
  PeerTransfer transfer;
  PeerIdentity peer;
  std::uint64_t number = 0;  // in moving_, while UCX moves its bytes
  void* request = nullptr;   // that receive or send
  ucp_ep_h ep = nullptr;
  std::uint64_t id = 0;
  std::uint64_t length = 0;
  UcxReplyHeader reply;  // sent from here: it must outlive the send
};

namespace {

struct SentReply {
  UcxReplyHeader header;
};

void FreeSentReply(void* request, ucs_status_t, void* user_data) {
  delete static_cast<SentReply*>(user_data);
  if (request != nullptr) ucp_request_free(request);
}

// A reply header alone, as active message `am`; it lives until sent.
void SendHeader(ucp_ep_h ep, unsigned am, std::unique_ptr<SentReply> sent) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.user_data = sent.get();
  p.cb.send = &FreeSentReply;
  ucs_status_ptr_t s = ucp_am_send_nbx(ep, am, &sent->header, sizeof sent->header, nullptr, 0, &p);
  SentReply* raw = sent.release();
  if (s == nullptr || UCS_PTR_IS_ERR(s)) FreeSentReply(nullptr, UCS_OK, raw);
}

}  // namespace

Result<std::unique_ptr<UcxPeerServer>> UcxPeerServer::Create(
    std::uint64_t max_payload_bytes, PeerHandler* handler,
    std::function<std::uint64_t()> incarnation) {
  std::unique_ptr<UcxPeerServer> s(
      new UcxPeerServer(max_payload_bytes, handler, std::move(incarnation)));
  auto worker = UcxWorker::Create(
      "tierpool-lender", {{kUcxAmWrite, &OnWrite, s.get()}, {kUcxAmRead, &OnRead, s.get()}});
  if (!worker.ok()) return worker.status();
  s->worker_ = std::move(worker).value();
  s->alive_->server = s.get();
  return s;
}

UcxPeerServer::~UcxPeerServer() {
  {
    std::lock_guard lock(alive_->mu);
    alive_->server = nullptr;
  }
  worker_.reset();
}

void UcxPeerServer::Cancel(std::uint64_t transfer) {
  auto it = moving_.find(transfer);
  if (it == moving_.end()) return;  // done, or not begun (its bytes land before the answer)
  // UCX 1.13 may leave an active message's transfer running (it cancels tag receives for sure);
  // then the endpoint's keepalive (UcxWorker: every second) ends it once its borrower is gone.
  ucp_request_cancel(worker_->worker(), it->second->request);
}

UcxOffer UcxPeerServer::Open(const PeerIdentity& peer) {
  std::lock_guard lock(mu_);
  auto& token = by_node_[peer.node_id];
  if (auto it = by_token_.find(token);
      it != by_token_.end() && it->second.incarnation == peer.incarnation) {
    return {worker_->address(), token};
  }
  by_token_.erase(token);  // the node's earlier incarnation: its token stops working
  token = PeerNonce().substr(0, kUcxTokenBytes);
  by_token_[token] = peer;
  return {worker_->address(), token};
}

bool UcxPeerServer::Lookup(const std::uint8_t* token, PeerIdentity* peer) const {
  std::lock_guard lock(mu_);
  auto it = by_token_.find(std::string(reinterpret_cast<const char*>(token), kUcxTokenBytes));
  if (it == by_token_.end()) return false;
  *peer = it->second;
  return true;
}

void UcxPeerServer::StallForTest(std::uint32_t ms) {
  worker_->Post([ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
}

UcxPeerServerCounters UcxPeerServer::counters() const {
  return {requests_.load(), refused_.load(), bytes_in_.load(), bytes_out_.load()};
}

ucs_status_t UcxPeerServer::OnWrite(void* arg, const void* header, std::size_t header_length,
                                    void* data, std::size_t length,
                                    const ucp_am_recv_param_t* param) {
  return static_cast<UcxPeerServer*>(arg)->Serve(true, header, header_length, data, length, param);
}

ucs_status_t UcxPeerServer::OnRead(void* arg, const void* header, std::size_t header_length,
                                   void* data, std::size_t length,
                                   const ucp_am_recv_param_t* param) {
  return static_cast<UcxPeerServer*>(arg)->Serve(false, header, header_length, data, length, param);
}

ucs_status_t UcxPeerServer::Serve(bool write, const void* header, std::size_t header_length,
                                  void* data, std::size_t length,
                                  const ucp_am_recv_param_t* param) {
  ++requests_;
  ucp_ep_h ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
  UcxRequestHeader h;
  if (header_length != sizeof h) {
    ++refused_;
    return UCS_OK;  // not ours to answer: no id to answer with (a rendezvous is dropped)
  }
  std::memcpy(&h, header, sizeof h);
  auto refuse = [&](const Status& s, const PeerIdentity* peer) {
    ++refused_;
    Reply(ep, h.id, peer, s);
    return UCS_OK;
  };
  if (h.magic != kUcxRequestMagic) return refuse(Status::InvalidArgument("not a request"), nullptr);
  PeerIdentity peer;
  if (!Lookup(h.token, &peer)) {
    return refuse(Status::PermissionDenied("unknown session (ask the peer link again)"), nullptr);
  }
  if (const std::uint64_t now = incarnation_(); h.lender_incarnation != now) {
    return refuse(Status::FailedPrecondition("this lender restarted since (incarnation " +
                                             std::to_string(now) + ")"),
                  &peer);
  }
  if (h.length > max_payload_bytes_ || length != (write ? h.length : 0)) {
    return refuse(Status::InvalidArgument("a " + std::to_string(h.length) + "-byte " +
                                          (write ? "write" : "read") + " with " +
                                          std::to_string(length) + " bytes"),
                  &peer);
  }
  wire::peer::RegionRange range;
  range.set_region(h.region);
  range.set_offset(h.offset);
  range.set_length(h.length);
  range.set_sequence(h.sequence);
  const std::uint64_t number = next_transfer_++;
  // A fence, or its region released, stops the transfer by canceling what UCX still moves of it.
  TransferStop stop = [alive = alive_, number] {
    std::lock_guard lock(alive->mu);
    UcxPeerServer* server = alive->server;
    if (server != nullptr) server->worker_->Post([server, number] { server->Cancel(number); });
  };
  auto begun = handler_->BeginTransfer(peer, range, write, std::move(stop));
  if (!begun.ok()) return refuse(begun.status(), &peer);
  auto t = std::make_unique<Transfer>();
  t->server = this;
  t->transfer = std::move(begun).value();
  t->peer = peer;
  t->ep = ep;
  t->id = h.id;
  t->length = h.length;
  t->number = number;
  if (!write) {
    Reply(ep, h.id, &peer, Status::Ok(), std::move(t));
    return UCS_OK;
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    std::memcpy(t->transfer.data, data, length);  // eager: the bytes came with the header
    bytes_in_ += length;
    t->transfer.hold.reset();
    Reply(ep, h.id, &peer, Status::Ok());
    return UCS_OK;
  }
  // Rendezvous: the bytes are fetched straight into the region (by the NIC, on RDMA), once this
  // callback has returned. The borrower hears first that they are on their way.
  Notify(ep, h.id);
  worker_->Post([this, desc = data, t = t.release()] {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.user_data = t;
    p.cb.recv_am = [](void* request, ucs_status_t status, std::size_t, void* user_data) {
      std::unique_ptr<Transfer> done(static_cast<Transfer*>(user_data));
      UcxPeerServer* server = done->server;
      server->moving_.erase(done->number);
      if (status == UCS_OK) server->bytes_in_ += done->length;
      done->transfer.hold.reset();
      server->Reply(done->ep, done->id, &done->peer, FromUcs(status, "receiving a write"));
      ucp_request_free(request);
    };
    ucs_status_ptr_t r =
        ucp_am_recv_data_nbx(worker_->worker(), desc, t->transfer.data, t->length, &p);
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
      t->request = r;
      moving_[t->number] = t;
      return;
    }
    {
      std::unique_ptr<Transfer> done(t);
      const ucs_status_t status = r == nullptr ? UCS_OK : UCS_PTR_STATUS(r);
      if (status == UCS_OK) bytes_in_ += done->length;
      done->transfer.hold.reset();
      Reply(done->ep, done->id, &done->peer, FromUcs(status, "receiving a write"));
    }
  });
  return UCS_INPROGRESS;  // the descriptor is ours until ucp_am_recv_data_nbx takes it
}

void UcxPeerServer::Notify(ucp_ep_h ep, std::uint64_t id) {
  if (ep == nullptr) return;
  auto sent = std::make_unique<SentReply>();
  sent->header.id = id;
  SendHeader(ep, kUcxAmStarted, std::move(sent));
}

void UcxPeerServer::Reply(ucp_ep_h ep, std::uint64_t id, const PeerIdentity* peer,
                          const Status& status, std::unique_ptr<Transfer> read) {
  if (ep == nullptr) return;  // the sender asked for no answer: it gets none
  auto sent = std::make_unique<SentReply>();
  UcxReplyHeader& r = sent->header;
  r.id = id;
  r.code = static_cast<std::uint32_t>(status.code());
  if (!status.ok()) r.SetMessage(status.message());
  if (peer != nullptr) {
    wire::peer::Response room;
    handler_->FillRoom(*peer, &room);
    r.lend_capacity = room.lend_capacity();
    r.lend_free = room.lend_free();
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  const void* bytes = nullptr;
  std::size_t length = 0;
  if (read != nullptr) {
    // The header lives in the transfer, which lives until the bytes are sent.
    read->reply = r;
    sent.reset();
    bytes = read->transfer.data;
    length = read->length;
    p.user_data = read.get();
    p.cb.send = [](void* request, ucs_status_t sent_status, void* user_data) {
      std::unique_ptr<Transfer> done(static_cast<Transfer*>(user_data));
      done->server->moving_.erase(done->number);
      if (sent_status == UCS_OK) done->server->bytes_out_ += done->length;
      if (request != nullptr) ucp_request_free(request);
    };
    ucs_status_ptr_t s =
        ucp_am_send_nbx(ep, kUcxAmReply, &read->reply, sizeof read->reply, bytes, length, &p);
    Transfer* raw = read.release();
    if (s != nullptr && !UCS_PTR_IS_ERR(s)) {
      raw->request = s;
      moving_[raw->number] = raw;
    } else if (s == nullptr) {
      p.cb.send(nullptr, UCS_OK, raw);
    } else if (UCS_PTR_IS_ERR(s)) {
      p.cb.send(nullptr, UCS_PTR_STATUS(s), raw);
    }
    return;
  }
  SendHeader(ep, kUcxAmReply, std::move(sent));
}

}  // namespace tierpool::transport
