// The C ABI (tierpool/c.h): opaque handles over the C++ client. Every entry point catches what
// the C++ side could throw (std::bad_alloc) so that no exception crosses into C.
#include "tierpool/c.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "client/stats_json.h"
#include "tierpool/client.h"

using tierpool::Status;
using tierpool::StatusCode;

struct tp_client {
  std::unique_ptr<tierpool::Client> client;
};
struct tp_view {
  tierpool::ObjectView view;
};
struct tp_reservation {
  tierpool::WriteReservation reservation;
};
struct tp_plan {
  tierpool::PlanHandle plan;
};

namespace {

char* CopyString(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

tp_code Report(const Status& s, char** error) {
  if (!s.ok() && error != nullptr) *error = CopyString(s.ToString());
  return static_cast<tp_code>(s.code());
}

// Runs body, turning a thrown exception into TP_INTERNAL.
template <typename Body>
tp_code Guard(char** error, Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Report(Status::ResourceExhausted("out of memory in the tierpool client"), error);
  } catch (const std::exception& e) {
    return Report(Status::Internal(e.what()), error);
  }
}

tp_code Missing(const char* what, char** error) {
  return Report(Status::InvalidArgument(std::string(what) + " is NULL"), error);
}

Status CheckEnum(const char* what, int value, int last, bool allow_unset) {
  if ((allow_unset && value == -1) || (value >= 0 && value <= last)) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + " " + std::to_string(value) +
                                 " is not one of tierpool/c.h's values");
}

Status ToPutOptions(const tp_put_options* in, tierpool::PutOptions* out) {
  if (in == nullptr) return Status::Ok();
  TIERPOOL_RETURN_IF_ERROR(CheckEnum("kind", in->kind, TP_KIND_WEIGHT, false));
  TIERPOOL_RETURN_IF_ERROR(CheckEnum("durability", in->durability, TP_DURABILITY_RETAINED, false));
  TIERPOOL_RETURN_IF_ERROR(CheckEnum("tier", in->tier, TP_TIER_NVME, true));
  if (in->shape_len > 0 && in->shape == nullptr) {
    return Status::InvalidArgument("shape is NULL but shape_len is not 0");
  }
  if (in->dtype != nullptr) out->dtype = in->dtype;
  out->shape.assign(in->shape, in->shape + in->shape_len);
  out->kind = static_cast<tierpool::ObjectKind>(in->kind);
  out->durability = static_cast<tierpool::Durability>(in->durability);
  if (in->tier >= 0) out->tier = static_cast<tierpool::TierKind>(in->tier);
  out->numa_node = in->numa_node;
  return Status::Ok();
}

void FillMeta(const tierpool::ObjectMeta& m, tp_object_meta* out) {
  out->key = CopyString(m.key);
  out->size = m.size;
  out->dtype = CopyString(m.dtype);
  out->shape_len = m.shape.size();
  out->shape = nullptr;
  if (!m.shape.empty()) {
    out->shape = static_cast<int64_t*>(std::malloc(m.shape.size() * sizeof(int64_t)));
    if (out->shape == nullptr) throw std::bad_alloc();
    std::memcpy(out->shape, m.shape.data(), m.shape.size() * sizeof(int64_t));
  }
  out->kind = static_cast<int>(m.kind);
  out->durability = static_cast<int>(m.durability);
  out->tier = static_cast<int>(m.tier);
  out->checksum = m.checksum;
  out->created_unix_ms = m.created_unix_ms;
  out->pins = m.pins;
  if (out->key == nullptr || out->dtype == nullptr) throw std::bad_alloc();
}

}  // namespace

// The C ABI is the library's public interface too (tierpool/export.h).
#pragma GCC visibility push(default)
extern "C" {

const char* tp_code_name(int code) {
  if (code < 0 || code > TP_PERMISSION_DENIED) return "UNKNOWN";
  return tierpool::StatusCodeName(static_cast<StatusCode>(code)).data();
}

void tp_free(void* p) { std::free(p); }

void tp_client_options_init(tp_client_options* o) {
  if (o == nullptr) return;
  *o = tp_client_options{};
  o->verify_checksums = 1;
  o->busy_poll_us = -1;
}

tp_code tp_connect(const tp_client_options* o, tp_client** out, char** error) {
  if (out == nullptr) return Missing("out", error);
  *out = nullptr;
  return Guard(error, [&] {
    tierpool::ClientOptions options;
    if (o != nullptr) {
      if (o->socket_path != nullptr) options.socket_path = o->socket_path;
      if (o->ns != nullptr) options.ns = o->ns;
      if (o->client_name != nullptr) options.client_name = o->client_name;
      if (o->max_connections > 0) options.max_connections = o->max_connections;
      options.verify_checksums = o->verify_checksums != 0;
      if (o->busy_poll_us >= 0) options.busy_poll_us = static_cast<unsigned>(o->busy_poll_us);
    }
    auto c = tierpool::Client::Connect(std::move(options));
    if (!c.ok()) return Report(c.status(), error);
    *out = new tp_client{std::move(c).value()};
    return TP_OK;
  });
}

void tp_close(tp_client* client) { delete client; }

const char* tp_client_namespace(const tp_client* client) {
  return client == nullptr ? "" : client->client->ns().c_str();
}

void tp_put_options_init(tp_put_options* o) {
  if (o == nullptr) return;
  *o = tp_put_options{};
  o->kind = TP_KIND_OTHER;
  o->durability = TP_DURABILITY_RETAINED;
  o->tier = -1;
  o->numa_node = -1;
}

tp_code tp_put(tp_client* client, const char* key, const void* data, size_t size,
               const tp_put_options* options, char** error) {
  if (client == nullptr) return Missing("client", error);
  if (key == nullptr) return Missing("key", error);
  if (data == nullptr && size > 0) return Missing("data", error);
  return Guard(error, [&] {
    tierpool::PutOptions po;
    Status s = ToPutOptions(options, &po);
    if (s.ok()) s = client->client->Put(key, data, size, po);
    return Report(s, error);
  });
}

tp_code tp_get(tp_client* client, const char* key, void* buffer, size_t capacity, size_t* size,
               char** error) {
  if (client == nullptr) return Missing("client", error);
  if (key == nullptr) return Missing("key", error);
  if (buffer == nullptr && capacity > 0) return Missing("buffer", error);
  return Guard(error, [&] {
    auto r = client->client->Get(key, buffer, capacity);
    if (r.ok() && size != nullptr) *size = *r;
    return Report(r.status(), error);
  });
}

tp_code tp_delete(tp_client* client, const char* key, char** error) {
  if (client == nullptr) return Missing("client", error);
  if (key == nullptr) return Missing("key", error);
  return Guard(error, [&] { return Report(client->client->Delete(key), error); });
}

tp_code tp_promote(tp_client* client, const char* key, int tier, char** error) {
  if (client == nullptr) return Missing("client", error);
  if (key == nullptr) return Missing("key", error);
  return Guard(error, [&] {
    Status s = CheckEnum("tier", tier, TP_TIER_NVME, false);
    if (s.ok()) s = client->client->Promote(key, static_cast<tierpool::TierKind>(tier));
    return Report(s, error);
  });
}

tp_code tp_get_view(tp_client* client, const char* key, int tier, tp_view** out, char** error) {
  if (out == nullptr) return Missing("out", error);
  *out = nullptr;
  if (client == nullptr) return Missing("client", error);
  if (key == nullptr) return Missing("key", error);
  return Guard(error, [&] {
    Status s = CheckEnum("tier", tier, TP_TIER_NVME, true);
    if (!s.ok()) return Report(s, error);
    tierpool::GetViewOptions vo;
    if (tier >= 0) vo.tier = static_cast<tierpool::TierKind>(tier);
    auto v = client->client->GetView(key, vo);
    if (!v.ok()) return Report(v.status(), error);
    *out = new tp_view{std::move(v).value()};
    return TP_OK;
  });
}

const void* tp_view_data(const tp_view* v) { return v == nullptr ? nullptr : v->view.data(); }
size_t tp_view_size(const tp_view* v) { return v == nullptr ? 0 : v->view.size(); }
int tp_view_tier(const tp_view* v) {
  return v == nullptr ? -1 : static_cast<int>(v->view.meta().tier);
}
uint64_t tp_view_checksum(const tp_view* v) { return v == nullptr ? 0 : v->view.meta().checksum; }

tp_code tp_view_verify(const tp_view* v, char** error) {
  if (v == nullptr) return Missing("view", error);
  return Report(v->view.Verify(), error);
}

void tp_view_release(tp_view* v) { delete v; }

tp_code tp_reserve(tp_client* client, const char* key, size_t size, const tp_put_options* options,
                   tp_reservation** out, char** error) {
  if (out == nullptr) return Missing("out", error);
  *out = nullptr;
  if (client == nullptr) return Missing("client", error);
  if (key == nullptr) return Missing("key", error);
  return Guard(error, [&] {
    tierpool::PutOptions po;
    Status s = ToPutOptions(options, &po);
    if (!s.ok()) return Report(s, error);
    auto r = client->client->Reserve(key, size, po);
    if (!r.ok()) return Report(r.status(), error);
    *out = new tp_reservation{std::move(r).value()};
    return TP_OK;
  });
}

void* tp_reservation_data(tp_reservation* r) {
  return r == nullptr ? nullptr : r->reservation.data();
}
size_t tp_reservation_size(const tp_reservation* r) {
  return r == nullptr ? 0 : r->reservation.size();
}

tp_code tp_commit(tp_reservation* r, char** error) {
  if (r == nullptr) return Missing("reservation", error);
  std::unique_ptr<tp_reservation> owned(r);
  return Guard(error, [&] { return Report(owned->reservation.Commit(), error); });
}

void tp_abort(tp_reservation* r) { delete r; }

tp_code tp_stat_object(tp_client* client, const char* key, tp_object_meta* out, char** error) {
  if (out == nullptr) return Missing("out", error);
  *out = tp_object_meta{};
  if (client == nullptr) return Missing("client", error);
  if (key == nullptr) return Missing("key", error);
  return Guard(error, [&] {
    auto m = client->client->Stat(key);
    if (!m.ok()) return Report(m.status(), error);
    try {
      FillMeta(*m, out);
    } catch (...) {
      tp_object_meta_clear(out);
      throw;
    }
    return TP_OK;
  });
}

void tp_object_meta_clear(tp_object_meta* m) {
  if (m == nullptr) return;
  std::free(m->key);
  std::free(m->dtype);
  std::free(m->shape);
  *m = tp_object_meta{};
}

tp_code tp_list(tp_client* client, const char* prefix, uint32_t limit, tp_object_meta** out,
                size_t* count, char** error) {
  if (out == nullptr) return Missing("out", error);
  if (count == nullptr) return Missing("count", error);
  *out = nullptr;
  *count = 0;
  if (client == nullptr) return Missing("client", error);
  return Guard(error, [&] {
    auto list = client->client->List(prefix == nullptr ? "" : prefix, limit == 0 ? 1000 : limit);
    if (!list.ok()) return Report(list.status(), error);
    auto* metas = static_cast<tp_object_meta*>(
        std::calloc(list->empty() ? 1 : list->size(), sizeof(tp_object_meta)));
    if (metas == nullptr) throw std::bad_alloc();
    try {
      for (std::size_t i = 0; i < list->size(); ++i) FillMeta((*list)[i], &metas[i]);
    } catch (...) {
      tp_object_meta_array_free(metas, list->size());
      throw;
    }
    *out = metas;
    *count = list->size();
    return TP_OK;
  });
}

void tp_object_meta_array_free(tp_object_meta* metas, size_t count) {
  if (metas == nullptr) return;
  for (size_t i = 0; i < count; ++i) tp_object_meta_clear(&metas[i]);
  std::free(metas);
}

tp_code tp_server_stat_json(tp_client* client, int reset_peaks, char** json, char** error) {
  if (json == nullptr) return Missing("json", error);
  *json = nullptr;
  if (client == nullptr) return Missing("client", error);
  return Guard(error, [&] {
    tierpool::StatOptions so;
    so.reset_peaks = reset_peaks != 0;
    auto stats = client->client->ServerStat(so);
    if (!stats.ok()) return Report(stats.status(), error);
    *json = CopyString(tierpool::StatsJson(*stats).dump());
    if (*json == nullptr) throw std::bad_alloc();
    return TP_OK;
  });
}

tp_code tp_put_batch(tp_client* client, tp_put_item* items, size_t count, char** error) {
  if (client == nullptr) return Missing("client", error);
  if (items == nullptr && count > 0) return Missing("items", error);
  return Guard(error, [&] {
    std::vector<tierpool::PutItem> batch(count);
    for (size_t i = 0; i < count; ++i) {
      if (items[i].key == nullptr) return Missing("an item's key", error);
      if (items[i].data == nullptr && items[i].size > 0) return Missing("an item's data", error);
      Status s = ToPutOptions(items[i].options, &batch[i].options);
      if (!s.ok()) return Report(s, error);
      batch[i].key = items[i].key;
      batch[i].data = items[i].data;
      batch[i].size = items[i].size;
    }
    auto statuses = client->client->PutBatch(batch);
    tp_code first = TP_OK;
    for (size_t i = 0; i < count; ++i) {
      items[i].code = static_cast<tp_code>(statuses[i].code());
      if (first == TP_OK && !statuses[i].ok()) first = Report(statuses[i], error);
    }
    return first;
  });
}

tp_code tp_get_batch(tp_client* client, tp_get_item* items, size_t count, char** error) {
  if (client == nullptr) return Missing("client", error);
  if (items == nullptr && count > 0) return Missing("items", error);
  return Guard(error, [&] {
    std::vector<tierpool::GetItem> batch(count);
    for (size_t i = 0; i < count; ++i) {
      if (items[i].key == nullptr) return Missing("an item's key", error);
      if (items[i].buffer == nullptr && items[i].capacity > 0) {
        return Missing("an item's buffer", error);
      }
      batch[i] = {items[i].key, items[i].buffer, items[i].capacity};
    }
    auto results = client->client->GetBatch(batch);
    tp_code first = TP_OK;
    for (size_t i = 0; i < count; ++i) {
      items[i].code = static_cast<tp_code>(results[i].status().code());
      items[i].size = results[i].ok() ? *results[i] : 0;
      if (first == TP_OK && !results[i].ok()) first = Report(results[i].status(), error);
    }
    return first;
  });
}

tp_code tp_delete_batch(tp_client* client, const char* const* keys, size_t count, tp_code* codes,
                        char** error) {
  if (client == nullptr) return Missing("client", error);
  if (keys == nullptr && count > 0) return Missing("keys", error);
  return Guard(error, [&] {
    std::vector<std::string> batch;
    batch.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      if (keys[i] == nullptr) return Missing("a key", error);
      batch.emplace_back(keys[i]);
    }
    auto statuses = client->client->DeleteBatch(batch);
    tp_code first = TP_OK;
    for (size_t i = 0; i < count; ++i) {
      if (codes != nullptr) codes[i] = static_cast<tp_code>(statuses[i].code());
      if (first == TP_OK && !statuses[i].ok()) first = Report(statuses[i], error);
    }
    return first;
  });
}

tp_code tp_register_plan(tp_client* client, const tp_plan_registration* r, tp_plan** out,
                         char** error) {
  if (out == nullptr) return Missing("out", error);
  *out = nullptr;
  if (client == nullptr) return Missing("client", error);
  if (r == nullptr) return Missing("registration", error);
  if (r->schedule == nullptr || r->plan == nullptr) return Missing("schedule or plan", error);
  if (r->keys == nullptr && r->key_count > 0) return Missing("keys", error);
  return Guard(error, [&] {
    tierpool::PlanRegistration reg;
    if (r->name != nullptr) reg.name = r->name;
    reg.schedule.assign(static_cast<const char*>(r->schedule), r->schedule_size);
    reg.plan.assign(static_cast<const char*>(r->plan), r->plan_size);
    for (size_t i = 0; i < r->key_count; ++i) {
      if (r->keys[i] == nullptr) return Missing("a key", error);
      reg.keys.emplace_back(r->keys[i]);
    }
    reg.hbm_budget_bytes = r->hbm_budget_bytes;
    auto h = client->client->RegisterPlan(reg);
    if (!h.ok()) return Report(h.status(), error);
    *out = new tp_plan{std::move(h).value()};
    return TP_OK;
  });
}

uint64_t tp_plan_job_id(const tp_plan* p) { return p == nullptr ? 0 : p->plan.job_id(); }

tp_code tp_plan_report_progress(tp_plan* p, uint64_t iteration, uint32_t step, char** error) {
  if (p == nullptr) return Missing("plan", error);
  return Report(p->plan.ReportProgress(iteration, step), error);
}

tp_code tp_plan_unregister(tp_plan* p, char** error) {
  if (p == nullptr) return Missing("plan", error);
  std::unique_ptr<tp_plan> owned(p);
  return Guard(error, [&] { return Report(owned->plan.Unregister(), error); });
}

}  // extern "C"
#pragma GCC visibility pop
