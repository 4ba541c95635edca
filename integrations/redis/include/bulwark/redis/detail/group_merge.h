// bulwark/redis/detail/group_merge.h — how a store that spreads the fleet's keys over
// hash-tag groups (RedisClusterStore, cluster_store.h) turns the groups' replies into
// one SyncReply. Not a contract for applications: shared by that store and the lab's
// sharded model of it (tools/lab), so that both merge the same way.
//
// A key's group is fnv1a(key) % groups. The merger keeps one cursor and incarnation per
// group (it serves one Fleet): the reply's sequence is the sum of the groups' cursors
// (0 when a group's went back, so that the Fleet reads everything again), its
// incarnation the groups' joined with '/' ("?" for one that never answered), its
// per-op lists in the request's order from each op's group; a group that did not answer
// marks its ops `lost` (their lease holder, counts and window totals placeholders).
// Changes keep their group's order; their until_ms move from their group's server_ms to
// the reply's (the first group's that answered). Cost: linear in the groups, ops and
// changes. Not thread-safe: one merger per store, used by one exchange at a time.

#ifndef BULWARK_REDIS_DETAIL_GROUP_MERGE_H_
#define BULWARK_REDIS_DETAIL_GROUP_MERGE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/redis/fleet_store.h"

namespace bulwark::redis::detail {

// The group of `key` among `groups` (>= 1): FNV-1a, the same on every instance and platform.
std::uint32_t group_of(std::string_view key, std::uint32_t groups) noexcept;

class GroupMerge {
 public:
  explicit GroupMerge(std::uint32_t groups) : groups_(groups) {}

  std::uint32_t groups() const noexcept { return static_cast<std::uint32_t>(groups_.size()); }
  // Before the groups are asked: a request whose cursor is not the sequence this merger
  // last returned (0 after a new incarnation, say) reads every group from the start.
  void begin(std::uint64_t request_cursor);
  // The cursor to send group `g`.
  std::uint64_t cursor(std::uint32_t g) const noexcept { return groups_[g].cursor; }
  std::uint64_t last_sequence() const noexcept { return last_sequence_; }

  // The merged reply. subs[g]: group g's reply, checked (lists matching its ops), or
  // empty if it did not answer (at least one did); op_group[i]: the group of
  // req.ops[i]; partial: why some did not ("" if all did). Moves out of `subs`.
  SyncReply merge(const SyncRequest& req, std::vector<std::optional<SyncReply>>& subs,
                  const std::vector<std::uint32_t>& op_group, std::string partial);

 private:
  struct Group {
    std::uint64_t cursor = 0;
    std::string incarnation;  // "" until it answers once
  };
  std::vector<Group> groups_;
  std::uint64_t last_sequence_ = 0;
};

}  // namespace bulwark::redis::detail

#endif  // BULWARK_REDIS_DETAIL_GROUP_MERGE_H_
