// bulwark/redis/cluster_store.h — the fleet's decisions sharded over hash-tag groups, in a
// Redis Cluster or on one server (hiredis 0.14, which knows nothing of Cluster: the
// routing is here).
//
// Groups. The keys of a deployment are spread over `groups` hash-tag groups: a breaker's
// key belongs to group fnv1a(key) % groups, and group NN keeps all of its keys (records,
// votes, leases, counts, fleet windows, its change log, counter and incarnation) under
// the prefix with ":NN" added inside the hash tag ("{bulwark}:fleet:" becomes
// "{bulwark:07}:fleet:"), as RedisFleetStore (redis_store.h) keeps them under one
// prefix: each group lies in one slot, and the same Lua script handles it atomically;
// nothing spans two groups. With groups = 1 (the default) the prefix is used as it is:
// the keys are RedisFleetStore's, and either store may serve a deployment. Every instance
// of a deployment must use the same group count (a key would be looked for in another
// group otherwise).
//
// One exchange() sends one script call per group, every group each time (a group with
// nothing to send still has to be read: other instances' decisions), pipelined: the
// calls to one node go out together and come back in one round trip, and the nodes
// are written to and read from together (one poll() over their sockets), so an
// exchange costs one round trip per node that holds a group, all at once, no more
// round trips than groups. A node that answers nothing costs the exchange its deadline
// only for its own groups: the others' replies are read meanwhile.
//
// Cluster routing (`cluster` true). The store reads the slot map (CLUSTER SLOTS) from
// `host`:`port` or a node of `seeds` on the first exchange, and again on the exchange
// after a redirect or a failed node. A group goes to the master of its hash tag's slot
// (CRC16-XMODEM of the tag, mod 16384, as Redis computes it). A MOVED reply updates the
// map and the call is sent once more to the node it names, in the same exchange; an ASK
// reply sends ASKING and the call once to the node it names, the map unchanged. One
// connection per node, each with its own reconnect backoff; AUTH on each. A slot map
// or a reply that is not what Redis sends is a `protocol` error naming what was wrong.
// With `cluster` false, host:port is one server holding every group.
//
// Partial answers. When some groups' node failed and others answered, exchange()
// succeeds with what the others said, and SyncReply::lost marks the ops it could not
// deliver (partial_error says why): the Fleet sends those again next time. Only when
// no group answered does exchange() fail. The reply's incarnation joins the groups'
// (a new one in any group makes every instance re-read all groups and re-publish its
// opens), its sequence is the sum of the groups' cursors (the store keeps one cursor
// per group: it serves one Fleet), and the until_ms of the changes are converted to the
// clock of the first group that answered (nodes' clocks may differ). Each group returns
// up to SyncRequest::max_changes changes: a reply holds at most groups times that.
//
// Timeouts, backoff, thread-safety and lifetime: as RedisFleetStore's. One deadline
// (`timeout`, or SyncRequest::deadline if sooner) bounds each exchange(), slot map
// reading, connecting, AUTH, SCRIPT LOAD and redirects included; one exchange() at a
// time (a second concurrent one is `rejected`); the store outlives every Fleet over it.

#ifndef BULWARK_REDIS_CLUSTER_STORE_H_
#define BULWARK_REDIS_CLUSTER_STORE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bulwark/redis/detail/group_merge.h"
#include "bulwark/redis/fleet_store.h"
#include "bulwark/redis/redis_store.h"

namespace bulwark::redis {

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster hashes keys:
// crc16("123456789") == 0x31C3.
std::uint16_t crc16(std::string_view bytes) noexcept;
// The Cluster slot of a key: CRC16 of its hash tag (what lies between the first '{' and
// the next '}', if that is not empty), else of the whole key, mod 16384.
std::uint16_t key_slot(std::string_view key) noexcept;

struct ClusterConfig {
  // host, port: a node (cluster) or the server; username, password (AUTH on every node),
  // prefix, retention, idle_ttl, timeout, reconnect_min/max as RedisFleetStore's.
  RedisConfig redis{};
  bool cluster = true;
  // More nodes to read the slot map from when none known answers ("host:port" each).
  std::vector<std::string> seeds{};
  // Hash-tag groups the keys are spread over: 1..1000.
  std::uint32_t groups = 1;
};

class RedisClusterStore final : public FleetStore {
 public:
  // Validates `config` (throws InvalidConfig naming the field). Does not connect.
  explicit RedisClusterStore(ClusterConfig config);
  RedisClusterStore(const RedisClusterStore&) = delete;
  RedisClusterStore& operator=(const RedisClusterStore&) = delete;
  ~RedisClusterStore() override;

  Expected<SyncReply, StoreError> exchange(const SyncRequest& request) override;
  std::chrono::milliseconds timeout() const noexcept override { return config_.redis.timeout; }

  // The group of a key, and a group's prefix (for tests and tools).
  std::uint32_t group_of(std::string_view key) const noexcept;
  const std::string& group_prefix(std::uint32_t group) const { return groups_[group].prefix; }
  // "host:port" of the node the slot map gives a group now ("" if none); call only
  // between exchanges.
  std::string node_of(std::uint32_t group) const;
  // Redirects followed (MOVED and ASK) and slot map reads, since construction.
  std::uint64_t redirects() const noexcept { return redirects_.load(std::memory_order_relaxed); }
  std::uint64_t map_reads() const noexcept { return map_reads_.load(std::memory_order_relaxed); }
  const ClusterConfig& config() const noexcept { return config_; }

 private:
  struct Node;
  struct Group {
    std::string prefix;
    std::uint16_t slot = 0;
  };
  struct Call;  // one group's script call in one exchange

  Node& node(const std::string& host, int port);
  Expected<void, StoreError> read_map(std::chrono::steady_clock::time_point deadline);
  void run(std::vector<Call*>& calls, std::chrono::steady_clock::time_point deadline);
  Expected<SyncReply, StoreError> exchange_locked(const SyncRequest& request);

  ClusterConfig config_;
  std::vector<Group> groups_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;  // by "host:port"
  std::vector<Node*> slots_;                            // slot -> master; empty: unknown
  bool map_stale_ = true;
  std::string sha_;
  detail::GroupMerge merge_;              // the groups' cursors and incarnations
  const SyncRequest* request_ = nullptr;  // during an exchange
  std::atomic<std::uint64_t> redirects_{0}, map_reads_{0};
};

}  // namespace bulwark::redis

#endif  // BULWARK_REDIS_CLUSTER_STORE_H_
