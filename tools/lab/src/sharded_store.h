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
// Cost: per exchange, one MemoryFleetStore exchange per group with ops or with
// changes after the client's cursor; a group with neither is answered from what the
// model knows of it (its incarnation and sequence: exactly what its MemoryFleetStore
// would say), so a quiet group costs a few comparisons, and an exchange with no ops
// from a client caught up with every group since none changed costs O(nodes). Not thread-safe (the
// lab's loop is one thread). Lifetime: the model outlives its clients, which outlive their Fleets.

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
  // holds a group), script calls its groups answered, ops delivered to them, and while
  // it was down the calls it left unanswered and the ops lost with them.
  struct NodeLoad {
    std::uint64_t exchanges = 0, calls = 0, ops = 0, unanswered = 0, lost_ops = 0;
  };

  // nodes >= 1, groups >= nodes; clock_ms: the store's clock (every group's).
  ShardedMemoryStore(std::uint32_t nodes, std::uint32_t groups,
                     std::function<std::int64_t()> clock_ms);

  std::uint32_t nodes() const noexcept { return static_cast<std::uint32_t>(loads_.size()); }
  std::uint32_t groups() const noexcept { return static_cast<std::uint32_t>(groups_.size()); }
  std::uint32_t node_of_group(std::uint32_t g) const noexcept { return g % nodes(); }
  std::uint32_t group_of(std::string_view key) const noexcept {
    return redis::detail::group_of(key, groups());
  }

  void set_node_down(std::uint32_t node, bool down) {
    if ((down_[node] != 0) != down) nodes_down_ += down ? 1 : -1;
    down_[node] = down;
  }
  void set_all_down(bool down) { all_down_ = down; }
  // The node's replica takes over its groups: with their data (kept), or empty.
  void take_over(std::uint32_t node, bool kept);
  const NodeLoad& load(std::uint32_t node) const { return loads_[node]; }
  // The record the key's group holds ("" if none).
  std::optional<redis::FleetRecord> record(const std::string& key) const;

  class Client final : public redis::FleetStore {
   public:
    explicit Client(ShardedMemoryStore& store) : store_(store), merge_(store.groups()) {}
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
  };
  Expected<redis::SyncReply, redis::StoreError> exchange(const redis::SyncRequest& request,
                                                         Client& client);

  std::function<std::int64_t()> clock_ms_;
  std::vector<Group> groups_;
  std::vector<NodeLoad> loads_;
  std::vector<char> down_;
  bool all_down_ = false;
  std::uint32_t nodes_down_ = 0;
  // Goes up whenever a group's sequence or incarnation changes.
  std::uint64_t generation_ = 0;
  // Scratch, reused by every exchange.
  redis::SyncRequest sub_;
  std::vector<std::optional<redis::SyncReply>> subs_;
  std::vector<std::uint32_t> op_group_;
  std::vector<std::vector<std::size_t>> group_ops_;
};

}  // namespace bulwark::lab::detail

#endif  // BULWARK_LAB_SRC_SHARDED_STORE_H_
