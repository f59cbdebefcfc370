// What the cluster end-to-end tests share: a real etcd on free loopback ports (its data in a
// throwaway directory, restartable on the same ports), the flags of a tierpoold that joins it,
// and helpers to fill a node with retained tensors and check every one of them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"
#include "tests/testing/peer_transport.h"
#include "tierpool/client.h"

namespace tierpool::testing {

// A free TCP port on 127.0.0.1 (bound and released: good enough for a test).
int FreePort();

// A single-member etcd (Debian's /usr/bin/etcd) on free loopback ports, or on `host` inside the
// network namespace `netns`.
class EtcdProcess {
 public:
  EtcdProcess() : EtcdProcess("", "") {}
  EtcdProcess(std::string netns, std::string host);
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;
  bool ready() const { return ready_; }
  const std::string& url() const { return url_; }
  const std::string& dir() const { return dir_; }
  // SIGKILL, then (Start) the same member on the same ports and data: what an operator's
  // restart, or a crash and a supervisor, does.
  void Kill();
  bool Start();
  // Killed, its data deleted, and started again empty: every lease and record gone.
  bool Wipe();
  // A request to its v3 JSON API (path: "kv/put", ...), from where clients reach it.
  std::string Post(const std::string& path, const std::string& json, int* rc) const;

 private:
  std::string netns_;
  pid_t pid_ = -1;
  std::string dir_, url_, peer_url_;
  bool ready_ = false;
};

struct NodeOptions {
  std::string peer_host = "127.0.0.1";  // where its peer listener binds
  std::string netns;                    // the network namespace it runs in ("": this one)
  std::string dram = "32M";
  std::string lend = "96M";
  int lend_grace_ms = 2000;
  int peer_lost_ms = 3000;  // --remote-peer-lost-ms: a silent peer's copies are rebuilt after it
  std::vector<std::string> extra_flags;  // appended to each node's
};

// The flags of a tierpoold that joins `cluster` in etcd as `node`, with (memory-backed) nvme
// below: once a peer dies and the remote tier cannot place two replicas, dram spills there.
std::vector<std::string> NodeFlags(const EtcdProcess& etcd, const std::string& secret,
                                   const std::string& node, const std::string& cluster,
                                   const NodeOptions& options = {});

// A secret file of mode 0600 in dir.
std::string WriteSecret(const std::string& dir, const std::string& name, const std::string& text);

std::uint64_t Counter(const ServerProcess& s, const char* name);
// The remote tier's state and object count in the stats ("" when there is none).
std::string RemoteState(const ServerStats& s);
std::uint64_t RemoteObjects(const ServerStats& s);
// The remote tier's state, members and counters in one line, for a failed wait's message.
std::string RemoteSummary(const ServerProcess& node);

// Puts Pattern(seed, size) as retained under key, retrying while room below is being granted.
Status PutRetained(Client& client, const std::string& key, std::uint64_t seed, std::size_t size);
// Gets key and compares it with Pattern(seed, size); the status says what was wrong.
Status CheckObject(Client& client, const std::string& key, std::uint64_t seed, std::size_t size);

// Every object "t0".."t<count-1>" of Pattern(i, size), byte for byte (a failure each for those
// that are not); returns the slowest get in seconds.
double CheckAll(const ServerProcess& node, int count, std::size_t size);

// An etcd, a shared secret and three nodes a, b, c of `cluster`; once Joined, each borrows from
// the other two. Without etcd (Debian's etcd-server) nothing starts and ready() is false.
class ThreeNodes {
 public:
  explicit ThreeNodes(const std::string& cluster, NodeOptions options = {});
  bool ready() const { return etcd_.ready(); }
  EtcdProcess& etcd() { return etcd_; }
  // Another node of the cluster (one of a, b, c back as a new incarnation, say).
  std::unique_ptr<ServerProcess> Start(const std::string& node);
  // All three up, each seeing the others and granted room on both.
  bool Joined() const;

 private:
  EtcdProcess etcd_;
  std::string cluster_, secret_;
  NodeOptions options_;

 public:
  std::unique_ptr<ServerProcess> a, b, c;
};

// Puts "t0".."t<count-1>" (Pattern(i, size), retained) into node; asserts that they went in and
// that some live on the remote tier.
void Fill(ServerProcess& node, int count = 16, std::size_t size = 4u << 20);
// Retained objects "t<from>".."t<to - 1>" of `size` bytes (PutRetained), each acknowledged.
void PutObjects(ServerProcess& node, int from, int to, std::size_t size);

// SIGSTOP for as long as it lives: a frozen process, resumed (SIGCONT) however the test ends.
class Frozen {
 public:
  explicit Frozen(pid_t pid);
  ~Frozen() { Resume(); }
  void Resume();

 private:
  pid_t pid_;
};

}  // namespace tierpool::testing
