// What etcd's v3 JSON gateway answers, decoded and checked: the bodies of lease, put and range
// calls, and the watch's stream of JSON lines. Every byte here is outside input (an etcd, or
// whatever answers on its address), so nothing throws past these functions and every field is
// checked for its type; keys and values travel as base64.
//
// Thread safety: the free functions are pure; a WatchLines belongs to one watch (one thread).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tierpool {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t mod_revision = 0;
};

struct EtcdEvent {
  bool deleted = false;
  EtcdKeyValue kv;
};

namespace etcd_wire {

std::string Base64(std::string_view in);
// Strict: a multiple of 4 characters of the base64 alphabet, '=' only as the last one or two.
Result<std::string> Unbase64(std::string_view in);

// The lease id of a grant (UNAVAILABLE when etcd granted none).
Result<std::int64_t> LeaseGranted(const std::string& body);
// A keep-alive's TTL in seconds; 0 when the lease is gone.
Result<std::int64_t> LeaseTtl(const std::string& body);
// A put's answer: OK, or the error etcd named.
Status PutAnswered(const std::string& body);
// A range's key-values; *revision (when not null): the store's revision the answer is of.
Result<std::vector<EtcdKeyValue>> RangeAnswered(const std::string& body, std::int64_t* revision);

// A watch's body: JSON objects, one per line, in pieces cut anywhere.
class WatchLines {
 public:
  static constexpr std::size_t kMaxLine = 64u << 20;

  // Takes the next piece and calls on_event for each event of every line it completes. OK while
  // the stream may go on; an error (a malformed line, a cancelled watch, a line over kMaxLine)
  // ends it. *stopped is set when on_event returned false (the rest is not looked at).
  Status Feed(std::string_view piece, const std::function<bool(const EtcdEvent&)>& on_event,
              bool* stopped);

 private:
  Status Line(std::string_view line, const std::function<bool(const EtcdEvent&)>& on_event,
              bool* stopped);

  std::string pending_;
  std::size_t scanned_ = 0;  // bytes at the start of pending_ that hold no newline
};

}  // namespace etcd_wire
}  // namespace tierpool
