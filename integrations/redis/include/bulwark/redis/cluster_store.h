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
// One exchange() sends, per group, either the script or a cheap read, pipelined: the
// commands to one node go out together and come back in one round trip, and the nodes
// are written to and read from together (one poll() over their sockets).
//   - A group with ops from this instance gets the script (EVALSHA), as RedisFleetStore.
//   - A group with none gets three plain commands instead: GET <group>seq, GET <group>id
//     and TIME (a few microseconds of the node's CPU, no script). When the counter is
//     this store's cursor for the group and the incarnation the one its script last
//     returned, the group has nothing to say: its part of the reply is that incarnation,
//     that cursor, TIME's clock, no change. Otherwise — the sequence moved (another
//     instance decided something there), the incarnation changed, a key is missing (the
//     group expired, or its node restarted or was flushed), a read failed (a key of the
//     wrong type) — the script runs for that group in the same exchange, in a second
//     pipelined round sent only to the nodes of those groups, each as soon as it
//     answered its reads; it reads the changes, starts a new incarnation if need be (and
//     the instances re-publish), repairs.
//   - The script runs at once, no read first, for a group without ops when the read
//     could not find it quiet: no script answered for it yet, its node's connection is
//     not the one its script last ran on (a reconnect: the node may have restarted from
//     a snapshot, keys intact, which only the script's run_id check notices), or its
//     heartbeat is due: at least once every `heartbeat` (per group, per store, measured
//     on SyncRequest::now_ms), since the script's refresh of the group's TTLs (idle_ttl)
//     is what keeps a quiet fleet's keys alive while its instances live.
// So an exchange costs one round trip when nothing changed beyond the heartbeat (and no
// script runs), two at worst when some group without ops must run its script (a
// redirect or a lost script adds one more, as below). A node that answers nothing
// costs the exchange its deadline only for its own groups: the others' replies are read
// meanwhile, and their follow-up scripts sent. script_calls() and reads() count both.
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
#include <chrono>
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
  // The script runs for a quiet group at least this often (see above), its TTL refresh
  // being the fleet's heartbeat; in between, a cheap read. Zero: idle_ttl / 8, at most
  // five minutes. Otherwise positive and below idle_ttl. Measured on the requests'
  // now_ms (the Fleet's wall clock); a clock that steps back runs the script at once.
  std::chrono::milliseconds heartbeat{0};
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
  // Script runs and cheap reads of a group (see above) sent, since construction (a
  // read followed by the script in the same exchange counts once each).
  std::uint64_t script_calls() const noexcept {
    return script_calls_.load(std::memory_order_relaxed);
  }
  std::uint64_t reads() const noexcept { return reads_.load(std::memory_order_relaxed); }
  // The heartbeat in use (config().heartbeat, or its default).
  std::chrono::milliseconds heartbeat() const noexcept { return heartbeat_; }
  const ClusterConfig& config() const noexcept { return config_; }

 private:
  struct Node;
  struct Group {
    std::string prefix;
    std::uint16_t slot = 0;
    // Where and when the script last answered for the group, and what it said: a cheap
    // read is enough while they hold.
    std::string incarnation;  // "" until the script answered once
    const Node* script_node = nullptr;
    std::uint64_t script_connection = 0;
    std::int64_t script_ms = 0;  // the request's now_ms
  };
  struct Call;  // one group's script call in one exchange

  Node& node(const std::string& host, int port);
  Expected<void, StoreError> read_map(std::chrono::steady_clock::time_point deadline);
  void run(std::vector<Call*>& calls, std::chrono::steady_clock::time_point deadline);
  // Judges a group's answered cheap read: true if the script must run for it; else
  // the read is the group's part of the reply (or an error, or a redirect to follow).
  bool read_wants_script(Call& c);
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
  std::chrono::milliseconds heartbeat_{0};
  std::atomic<std::uint64_t> redirects_{0}, map_reads_{0}, script_calls_{0}, reads_{0};
};

}  // namespace bulwark::redis

#endif  // BULWARK_REDIS_CLUSTER_STORE_H_
