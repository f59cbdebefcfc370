/* The tierpool client's C ABI: the C++ client (tierpool/client.h) behind opaque handles, for C
 * programs and other languages' bindings.
 *
 *   tp_client* c;
 *   char* err = NULL;
 *   if (tp_connect(NULL, &c, &err) != TP_OK) { fprintf(stderr, "%s\n", err); tp_free(err); }
 *   tp_put(c, "layer3.act", buf, n, NULL, NULL);
 *   tp_view* v;
 *   if (tp_get_view(c, "layer3.act", -1, &v, NULL) == TP_OK) {
 *     use(tp_view_data(v), tp_view_size(v));
 *     tp_view_release(v);
 *   }
 *   tp_close(c);
 *
 * Errors: each call that can fail returns a tp_code (TP_OK is 0). When `error` is not NULL and
 * the call fails, *error receives a message allocated with malloc: free it with tp_free. The
 * codes and their values are those of tierpool::StatusCode.
 *
 * Threads: a tp_client may be used from several threads at once. A tp_view, tp_reservation or
 * tp_plan belongs to one thread at a time.
 *
 * fork(): a client, view, reservation or plan made before fork() is the parent's. In the child
 * every call on it fails with TP_FAILED_PRECONDITION, releasing or closing it there sends nothing
 * to the server, and the child connects its own client.
 */
#ifndef TIERPOOL_C_H_
#define TIERPOOL_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tp_code {
  TP_OK = 0,
  TP_INVALID_ARGUMENT = 1,
  TP_NOT_FOUND = 2,
  TP_ALREADY_EXISTS = 3,
  TP_RESOURCE_EXHAUSTED = 4,
  TP_FAILED_PRECONDITION = 5,
  TP_UNAVAILABLE = 6,
  TP_DATA_LOSS = 7,
  TP_INTERNAL = 8,
  TP_DEADLINE_EXCEEDED = 9,
  TP_UNIMPLEMENTED = 10,
  TP_IO_ERROR = 11,
  TP_ABORTED = 12,
  TP_PERMISSION_DENIED = 13
} tp_code;

/* Tiers (fastest first), object kinds and durabilities: the values of tierpool/types.h. */
enum { TP_TIER_HBM = 0, TP_TIER_DRAM = 1, TP_TIER_REMOTE = 2, TP_TIER_NVME = 3 };
enum {
  TP_KIND_OTHER = 0,
  TP_KIND_KV_BLOCK = 1,
  TP_KIND_ACTIVATION = 2,
  TP_KIND_OPTIMIZER_STATE = 3,
  TP_KIND_WEIGHT = 4
};
enum { TP_DURABILITY_CACHE = 0, TP_DURABILITY_RETAINED = 1 };

typedef struct tp_client tp_client;
typedef struct tp_view tp_view;
typedef struct tp_reservation tp_reservation;
typedef struct tp_plan tp_plan;

/* "NOT_FOUND" and so on; "UNKNOWN" for a value that is not a code. */
const char* tp_code_name(int code);
/* Frees what the library allocated for the caller (messages, JSON, lists). NULL is fine. */
void tp_free(void* p);

typedef struct tp_client_options {
  const char* socket_path; /* NULL: $TIERPOOL_SOCKET, $XDG_RUNTIME_DIR/tierpool.sock, else
                              /tmp/tierpool-<uid>.sock */
  const char* ns;          /* NULL: "default" */
  const char* client_name; /* shows in the server's logs; NULL: none */
  int max_connections;     /* concurrent calls in flight; 0: 4 */
  int verify_checksums;    /* nonzero (tp_client_options_init's): copying gets check the bytes
                              against the object's XXH3 as they copy them; 0: plain copies */
  int busy_poll_us;        /* poll this long for a reply before sleeping; -1: the default (50) */
} tp_client_options;

/* Fills in the defaults. */
void tp_client_options_init(tp_client_options* options);
/* options NULL: all defaults. */
tp_code tp_connect(const tp_client_options* options, tp_client** out, char** error);
/* Closes the connections. Views, reservations and plans made from it stay usable. */
void tp_close(tp_client* client);
/* The namespace the client's keys live in (owned by the client). */
const char* tp_client_namespace(const tp_client* client);

typedef struct tp_put_options {
  const char* dtype;    /* informational, e.g. "float16"; NULL: none */
  const int64_t* shape; /* informational; shape_len values */
  size_t shape_len;
  int kind;       /* TP_KIND_*; default TP_KIND_OTHER */
  int durability; /* TP_DURABILITY_*; default TP_DURABILITY_RETAINED */
  int tier;       /* TP_TIER_HBM to place it in hbm; -1 (default): dram */
  int numa_node;  /* preferred NUMA node for dram; -1 (default): any */
} tp_put_options;

void tp_put_options_init(tp_put_options* options);

/* Copies size bytes from data under key (replacing an object of that key). options may be NULL. */
tp_code tp_put(tp_client* client, const char* key, const void* data, size_t size,
               const tp_put_options* options, char** error);
/* Copies the object into buffer and sets *size (may be NULL) to its size. A buffer too small
 * gives TP_INVALID_ARGUMENT; tp_stat_object says how large an object is. */
tp_code tp_get(tp_client* client, const char* key, void* buffer, size_t capacity, size_t* size,
               char** error);
tp_code tp_delete(tp_client* client, const char* key, char** error);
/* Moves an object to a tier: TP_TIER_HBM ahead of use, TP_TIER_DRAM out of the way. */
tp_code tp_promote(tp_client* client, const char* key, int tier, char** error);

/* ---- zero copy ---- */

/* Pins the object and maps it read-only: the bytes stay where they are until tp_view_release,
 * however long that is. tier: TP_TIER_HBM asks for the hbm copy (waiting for a prefetch or
 * bringing it up); -1: wherever it is. */
tp_code tp_get_view(tp_client* client, const char* key, int tier, tp_view** out, char** error);
const void* tp_view_data(const tp_view* view);
size_t tp_view_size(const tp_view* view);
int tp_view_tier(const tp_view* view);
uint64_t tp_view_checksum(const tp_view* view);
/* Checks the bytes against the object's XXH3-64 checksum (TP_DATA_LOSS when they differ). */
tp_code tp_view_verify(const tp_view* view, char** error);
/* Unpins and frees the handle. */
void tp_view_release(tp_view* view);

/* Two-phase put: room for size bytes in shared memory; write them at tp_reservation_data, then
 * tp_commit (which checksums them and publishes the object) or tp_abort. Both free the handle. */
tp_code tp_reserve(tp_client* client, const char* key, size_t size, const tp_put_options* options,
                   tp_reservation** out, char** error);
void* tp_reservation_data(tp_reservation* reservation);
size_t tp_reservation_size(const tp_reservation* reservation);
tp_code tp_commit(tp_reservation* reservation, char** error);
void tp_abort(tp_reservation* reservation);

/* ---- metadata ---- */

typedef struct tp_object_meta {
  char* key;
  uint64_t size;
  char* dtype;
  int64_t* shape;
  size_t shape_len;
  int kind;
  int durability;
  int tier;
  uint64_t checksum; /* XXH3-64 of the bytes */
  uint64_t created_unix_ms;
  uint32_t pins;
} tp_object_meta;

/* Fills *out; free its strings with tp_object_meta_clear. */
tp_code tp_stat_object(tp_client* client, const char* key, tp_object_meta* out, char** error);
void tp_object_meta_clear(tp_object_meta* meta);
/* Objects whose key starts with prefix (NULL: all), at most limit (0: 1000). Free the array with
 * tp_object_meta_array_free. */
tp_code tp_list(tp_client* client, const char* prefix, uint32_t limit, tp_object_meta** out,
                size_t* count, char** error);
void tp_object_meta_array_free(tp_object_meta* metas, size_t count);
/* The server's statistics as JSON (the layout of `tierpool stat --json`), NUL-terminated; free
 * with tp_free. reset_peaks nonzero: each tier's peak starts again from its use now. */
tp_code tp_server_stat_json(tp_client* client, int reset_peaks, char** json, char** error);

/* ---- batches: one round trip for the lot ---- */

typedef struct tp_put_item {
  const char* key;
  const void* data;
  size_t size;
  const tp_put_options* options; /* NULL: defaults */
  tp_code code;                  /* out */
} tp_put_item;

typedef struct tp_get_item {
  const char* key;
  void* buffer;
  size_t capacity;
  size_t size;  /* out: the object's size */
  tp_code code; /* out */
} tp_get_item;

/* Each item's outcome is in its code; the call returns TP_OK when every item succeeded, else the
 * first failing item's code (and its message in *error). */
tp_code tp_put_batch(tp_client* client, tp_put_item* items, size_t count, char** error);
tp_code tp_get_batch(tp_client* client, tp_get_item* items, size_t count, char** error);
/* codes may be NULL; otherwise count codes are written. */
tp_code tp_delete_batch(tp_client* client, const char* const* keys, size_t count, tp_code* codes,
                        char** error);

/* ---- plans (docs/schedules.md, "Live prefetch") ---- */

typedef struct tp_plan_registration {
  const char* name; /* NULL: the schedule's */
  const void* schedule;
  size_t schedule_size; /* a serialized tierpool.schedule.Schedule (a .pb file's bytes) */
  const void* plan;
  size_t plan_size;        /* a serialized tierpool.schedule.Plan for it */
  const char* const* keys; /* the object key of each tensor; NULL: the tensors' names */
  size_t key_count;
  uint64_t hbm_budget_bytes; /* 0: the plan's */
} tp_plan_registration;

/* The plan lives until tp_plan_unregister, or until the process dies. */
tp_code tp_register_plan(tp_client* client, const tp_plan_registration* registration, tp_plan** out,
                         char** error);
uint64_t tp_plan_job_id(const tp_plan* plan);
/* The job is about to start `step` of `iteration`; one-way, cheap enough for every step. */
tp_code tp_plan_report_progress(tp_plan* plan, uint64_t iteration, uint32_t step, char** error);
/* Drops the plan and frees the handle. */
tp_code tp_plan_unregister(tp_plan* plan, char** error);

#ifdef __cplusplus
}
#endif

#endif /* TIERPOOL_C_H_ */
