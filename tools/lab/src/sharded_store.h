// Internal to the lab: the fleet's store sharded over nodes, in one process — what
// RedisClusterStore (bulwark/redis/cluster_store.h) does against a Redis Cluster, over
// one MemoryFleetStore per hash-tag group. Group g lies on node g % nodes. Each Fleet
// gets its own Client (a FleetStore: its group cursors, as a RedisClusterStore serves
// one Fleet), and every Client's exchange asks every group, splits the ops by their
// key's group and merges the groups' replies with the cluster store's own merge
// (bulwark/redis/detail/group_merge.h): a node that is down leaves its groups out, its
// ops marked lost (the Fleet sends them again), and fails the exchange only when no
// group answered. A node's replica taking over empty restarts its groups (a new
// incarnation: every instance re-reads and re-publishes its opens).
//
// What each node is asked, counted as RedisClusterStore asks it: per exchange and group,
// the script (a script call) when the group has ops from this client, its sequence moved
// past the client's cursor for it (or the model is not sure of it), its incarnation is
// not the one the client's script last saw there, the client's connection to the node
// is new (first contact after the node came back or its replica took over), or the
// group's heartbeat is due (`heartbeat_ms` after the client's script last ran for it;
// RedisClusterStore's default, idle_ttl / 8 at most 5 min, is 5 min for the default
// idle_ttl); otherwise the cheap read (GET seq, GET id, TIME). Accounting only: what
// every exchange answers does not depend on it.
//
// Cost: per exchange, one MemoryFleetStore exchange per group with ops or with
// changes after the client's cursor; a group with neither is answered from what the
// model knows of it (its incarnation and sequence: exactly what its MemoryFleetStore
// would say), so a quiet group costs a few comparisons, and an exchange with no ops
// from a client caught up with every group since none changed costs O(nodes) (O(groups)
// when a connection is new or a heartbeat due). A Client holds 12 bytes per group and 4
// per node for the accounting. Not thread-safe (the lab's loop is one thread).
// Lifetime: the model outlives its clients, which outlive their Fleets.

#ifndef BULWARK_LAB_SRC_SHARDED_STORE_H_
#define BULWARK_LAB_SRC_SHARDED_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/redis/detail/group_merge.h"
#include "bulwark/redis/fleet_store.h"

namespace bulwark::lab::detail {

class ShardedMemoryStore {
 public:
  // What one node carried: exchanges that asked it (one per Client exchange while it
  // holds a group), group calls its groups answered (calls = scripts + reads: each
  // group of an answered exchange gets one or the other, as above), the exchanges in
  // which it got at least one read (the reads of one exchange go to a node pipelined,
  // one round trip), ops delivered to its groups, and while it was down the calls it
  // left unanswered and the ops lost with them. So scripts + reads + unanswered =
  // exchanges x its groups.
  struct NodeLoad {
    std::uint64_t exchanges = 0, calls = 0, scripts = 0, reads = 0, read_exchanges = 0, ops = 0,
                  unanswered = 0, lost_ops = 0;
  };

  // RedisClusterStore's default heartbeat for RedisConfig's default idle_ttl (24 h):
  // idle_ttl / 8, at most 5 minutes.
  static constexpr std::int64_t kDefaultHeartbeatMs = 5 * 60 * 1000;

  // nodes >= 1, groups >= nodes; clock_ms: the store's clock (every group's);
  // heartbeat_ms > 0.
  ShardedMemoryStore(std::uint32_t nodes, std::uint32_t groups,
                     std::function<std::int64_t()> clock_ms,
                     std::int64_t heartbeat_ms = kDefaultHeartbeatMs);

  std::uint32_t nodes() const noexcept { return static_cast<std::uint32_t>(loads_.size()); }
  std::uint32_t groups() const noexcept { return static_cast<std::uint32_t>(groups_.size()); }
  std::uint32_t node_of_group(std::uint32_t g) const noexcept { return g % nodes(); }
  std::uint32_t group_of(std::string_view key) const noexcept {
    return redis::detail::group_of(key, groups());
  }

  // A node coming back up is a new connection for every client (its first exchange
  // with it runs the script for each of the node's groups).
  void set_node_down(std::uint32_t node, bool down) {
    if ((down_[node] != 0) != down) {
      nodes_down_ += down ? 1 : -1;
      if (!down) reconnect(node);
    }
    down_[node] = down;
  }
  void set_all_down(bool down) {
    if (all_down_ && !down) {
      for (std::uint32_t k = 0; k < nodes(); ++k) reconnect(k);
    }
    all_down_ = down;
  }
  // The node's replica takes over its groups: with their data (kept), or empty.
  void take_over(std::uint32_t node, bool kept);
  const NodeLoad& load(std::uint32_t node) const { return loads_[node]; }
  // The record the key's group holds ("" if none).
  std::optional<redis::FleetRecord> record(const std::string& key) const;

  class Client final : public redis::FleetStore {
   public:
    explicit Client(ShardedMemoryStore& store)
        : store_(store),
          merge_(store.groups()),
          script_epoch_(store.groups(), 0),
          script_ms_(store.groups(), 0),
          connection_(store.nodes(), 0) {}
    Expected<redis::SyncReply, redis::StoreError> exchange(
        const redis::SyncRequest& request) override {
      return store_.exchange(request, *this);
    }

   private:
    friend class ShardedMemoryStore;
    ShardedMemoryStore& store_;
    redis::detail::GroupMerge merge_;
    // Caught up with every group at the store's `generation` (none changed since): an
    // exchange with no ops gets `incarnation` and `sequence` again, as the merge would.
    std::uint64_t generation = ~std::uint64_t{0};
    std::string incarnation;
    std::uint64_t sequence = 0;
    // Accounting (RedisClusterStore's per-group state): per group, the incarnation
    // (Group::epoch, 0: none yet) and time its script last answered; per node, the
    // connection (the store's connection_) it last talked to; the earliest heartbeat
    // due, and the store's reconnects_ when it last looked at its connections.
    std::vector<std::uint32_t> script_epoch_;
    std::vector<std::int64_t> script_ms_;
    std::vector<std::uint32_t> connection_;
    std::int64_t next_heartbeat_ms_ = 0, latest_script_ms_ = 0;
    std::uint64_t reconnects_ = ~std::uint64_t{0};
  };

 private:
  struct Group {
    std::unique_ptr<redis::MemoryFleetStore> store;
    // What its store would answer a read with no ops at its newest sequence: kept from
    // its replies (nothing else writes to it). `known` false: not sure (a reply cut at
    // max_changes), ask the store.
    std::uint64_t sequence = 0;
    std::string incarnation = "1";
    bool known = true;
    std::uint32_t epoch = 1;  // goes up with every new incarnation
  };
  Expected<redis::SyncReply, redis::StoreError> exchange(const redis::SyncRequest& request,
                                                         Client& client);
  void reconnect(std::uint32_t node) {
    ++connection_[node];
    ++reconnects_;
  }
  // Whether `client`'s exchange at `now_ms` without ops for group g, its cursor at the
  // group's sequence, would run the script (else: the cheap read).
  bool script_due(const Client& client, std::uint32_t g, std::int64_t now_ms) const;
  // Counts group g's script (recording it in `client`) or read on its node.
  void count_call(Client& client, std::uint32_t g, bool script, std::int64_t now_ms);
  // After an exchange's calls: the client's connections to the nodes that answered are
  // the current ones; its heartbeats' earliest due time and latest script, kept.
  void after_calls(Client& client);

  std::function<std::int64_t()> clock_ms_;
  std::vector<Group> groups_;
  std::vector<NodeLoad> loads_;
  std::vector<char> down_;
  std::int64_t heartbeat_ms_;
  std::vector<std::uint32_t> connection_;  // per node: goes up when it comes back
  std::uint64_t reconnects_ = 0;           // the sum of connection_
  bool all_down_ = false;
  std::uint32_t nodes_down_ = 0;
  // Goes up whenever a group's sequence or incarnation changes.
  std::uint64_t generation_ = 0;
  // Scratch, reused by every exchange.
  redis::SyncRequest sub_;
  std::vector<std::optional<redis::SyncReply>> subs_;
  std::vector<std::uint32_t> op_group_;
  std::vector<std::vector<std::size_t>> group_ops_;
  std::vector<std::uint64_t> read_stamp_;  // per node: the last exchange it got a read in
  std::uint64_t exchange_no_ = 0;
};

}  // namespace bulwark::lab::detail

#endif  // BULWARK_LAB_SRC_SHARDED_STORE_H_
