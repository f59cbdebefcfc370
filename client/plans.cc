// Plans: registering a job's plan on a connection of its own, and the handle that reports
// progress on it (docs/schedules.md, "Live prefetch").
#include "client/client_core.h"
#include "tierpool/client.h"

namespace tierpool {

using transport::FromWire;

Result<PlanHandle> Client::RegisterPlan(const PlanRegistration& r) {
  // Its own connection, outside the pool: the server ties the plan to the connection.
  auto conn = core_->Open();
  if (!conn.ok()) return conn.status();
  wire::Request req;
  auto* w = req.mutable_register_plan();
  w->set_format_version(1);
  w->set_ns(core_->options.ns);
  w->set_name(r.name);
  w->set_schedule(r.schedule);
  w->set_plan(r.plan);
  for (const auto& k : r.keys) w->add_keys(k);
  w->set_hbm_budget_bytes(r.hbm_budget_bytes);
  w->set_owned_prefix(r.owned_prefix);
  wire::Response resp;
  TIERPOOL_RETURN_IF_ERROR((*conn)->Call(req, &resp));
  TIERPOOL_RETURN_IF_ERROR(FromWire(resp.status()));
  if (!resp.has_register_plan()) return Status::Internal("bad register-plan reply");
  PlanHandle h;
  h.conn_ = std::move(conn).value();
  h.job_id_ = resp.register_plan().job_id();
  return h;
}

PlanHandle::PlanHandle(PlanHandle&& o) noexcept { *this = std::move(o); }
PlanHandle& PlanHandle::operator=(PlanHandle&& o) noexcept {
  if (this != &o) {
    (void)Unregister();
    conn_ = std::move(o.conn_);
    job_id_ = std::exchange(o.job_id_, 0);
  }
  return *this;
}
PlanHandle::~PlanHandle() { (void)Unregister(); }

Status PlanHandle::ReportProgress(std::uint64_t iteration, std::uint32_t step) {
  return ReportProgress(iteration, step, 0);
}

Status PlanHandle::ReportProgress(std::uint64_t iteration, std::uint32_t step,
                                  std::uint64_t outside_bytes) {
  if (!conn_) return Status::FailedPrecondition("the plan is not registered");
  if (conn_->Forked()) return detail::ForkedStatus(conn_->owner_pid);
  wire::Request req;
  auto* p = req.mutable_progress();
  p->set_job_id(job_id_);
  p->set_iteration(iteration);
  p->set_step(step);
  p->set_outside_bytes(outside_bytes);
  conn_->SendOneWay(req);
  return conn_->conn->broken() ? Status::Unavailable("the connection to tierpoold is gone")
                               : Status::Ok();
}

Status PlanHandle::Unregister() {
  if (!conn_) return Status::Ok();
  wire::Request req;
  req.mutable_unregister_plan()->set_job_id(job_id_);
  wire::Response resp;
  Status s = conn_->Call(req, &resp);
  if (s.ok()) s = FromWire(resp.status());
  conn_.reset();  // closing the connection drops the plan in any case
  return s;
}

}  // namespace tierpool
