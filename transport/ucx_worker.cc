#include "transport/ucx_worker.h"

#include <poll.h>
#include <uct/api/uct.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/logging.h"

namespace tierpool::transport {

namespace {
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(50);
}  // namespace

Status FromUcs(ucs_status_t status, const std::string& what) {
  if (status == UCS_OK) return Status::Ok();
  const std::string text = what + ": " + ucs_status_string(status);
  switch (status) {
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return Status::DeadlineExceeded(text);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
      return Status::ResourceExhausted(text);
    case UCS_ERR_INVALID_PARAM:
      return Status::InvalidArgument(text);
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_CANCELED:
    default:
      return Status::Unavailable(text);
  }
}

Result<std::unique_ptr<UcxWorker>> UcxWorker::Create(const std::string& name,
                                                     const std::vector<UcxAmHandler>& handlers) {
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  ucp_config_t* config = nullptr;
  // Reads UCX_TLS and the other UCX_* variables.
  TIERPOOL_RETURN_IF_ERROR(FromUcs(ucp_config_read(nullptr, nullptr, &config), "UCX config"));
  // An endpoint whose other side is gone (a borrower that gave up on a transfer closes its
  // endpoint; a lender that died) fails what is in flight on it once UCX's keepalive finds out:
  // every second here, not UCX's 20 s, unless UCX_KEEPALIVE_INTERVAL says otherwise. Until then a
  // lender's region stays held by such a transfer.
  if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    (void)ucp_config_modify(config, "KEEPALIVE_INTERVAL", "1s");
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = name.c_str();
  const ucs_status_t init = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  TIERPOOL_RETURN_IF_ERROR(FromUcs(init, "UCX init"));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // the progress thread alone calls into it
  TIERPOOL_RETURN_IF_ERROR(FromUcs(ucp_worker_create(w->context_, &wp, &w->worker_), "UCX worker"));
  for (const UcxAmHandler& h : handlers) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = h.id;
    hp.cb = h.callback;
    hp.arg = h.arg;
    TIERPOOL_RETURN_IF_ERROR(
        FromUcs(ucp_worker_set_am_recv_handler(w->worker_, &hp), "UCX active-message handler"));
  }
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  TIERPOOL_RETURN_IF_ERROR(
      FromUcs(ucp_worker_get_address(w->worker_, &address, &length), "UCX worker address"));
  w->address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(w->worker_, address);
  int fd = -1;
  if (ucp_worker_get_efd(w->worker_, &fd) == UCS_OK) w->event_fd_ = fd;
  w->thread_ = std::thread([raw = w.get()] { raw->Loop(); });
  return w;
}

UcxWorker::~UcxWorker() {
  if (thread_.joinable()) {
    stopping_ = true;
    ucp_worker_signal(worker_);  // thread-safe, unlike the rest of the worker
    thread_.join();
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

void UcxWorker::Post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(task));
  }
  ucp_worker_signal(worker_);
}

bool UcxWorker::RunPosted() {
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard lock(mu_);
    tasks.swap(posted_);
  }
  for (auto& t : tasks) t();
  return !tasks.empty();
}

void UcxWorker::Loop() {
  auto idle_since = std::chrono::steady_clock::now();
  for (;;) {
    const bool ran = RunPosted();
    if (stopping_.load()) {
      // What was posted before the stop still runs (an owner's endpoint closes), with progress
      // for a moment so that they complete.
      for (int i = 0; i < 1000 && (RunPosted() || ucp_worker_progress(worker_) != 0); ++i) {
      }
      return;
    }
    if (ucp_worker_progress(worker_) != 0 || ran) {
      idle_since = std::chrono::steady_clock::now();
      continue;
    }
    // A transfer is a few exchanges each way (a rendezvous: request, the bytes, the answer):
    // sleeping between them costs a wake-up each, so the thread polls a moment before it sleeps.
    if (std::chrono::steady_clock::now() - idle_since < kSpinBeforeSleep) continue;
    if (event_fd_ < 0) {
      std::this_thread::yield();
      continue;
    }
    // Armed, then the queue checked again: a task posted after the check signals the armed fd.
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;
    {
      std::lock_guard lock(mu_);
      if (!posted_.empty()) continue;
    }
    pollfd p{event_fd_, POLLIN, 0};
    // A bound: a missed wake-up costs 100 ms, never a hang.
    (void)::poll(&p, 1, 100);
  }
}

std::vector<std::string> UcxRdmaTransports() {
  std::vector<std::string> found;
  uct_component_h* components = nullptr;
  unsigned n = 0;
  if (uct_query_components(&components, &n) != UCS_OK) return found;
  for (unsigned c = 0; c < n; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (mds.empty() || uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const auto& md_desc : mds) {
      uct_md_config_t* md_config = nullptr;
      if (uct_md_config_read(components[c], nullptr, nullptr, &md_config) != UCS_OK) continue;
      uct_md_h md = nullptr;
      const ucs_status_t opened = uct_md_open(components[c], md_desc.md_name, md_config, &md);
      uct_config_release(md_config);
      if (opened != UCS_OK) continue;
      uct_tl_resource_desc_t* tls = nullptr;
      unsigned ntl = 0;
      if (uct_md_query_tl_resources(md, &tls, &ntl) == UCS_OK) {
        for (unsigned t = 0; t < ntl; ++t) {
          const std::string tl = tls[t].tl_name;
          if (tl.rfind("rc", 0) == 0 || tl.rfind("dc", 0) == 0 || tl.rfind("ud", 0) == 0) {
            found.push_back(tl + "/" + tls[t].dev_name);
          }
        }
        uct_release_tl_resource_list(tls);
      }
      uct_md_close(md);
    }
  }
  uct_release_component_list(components);
  return found;
}

}  // namespace tierpool::transport
