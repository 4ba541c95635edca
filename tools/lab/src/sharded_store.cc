#include "sharded_store.h"

#include <utility>

namespace bulwark::lab::detail {

ShardedMemoryStore::ShardedMemoryStore(std::uint32_t nodes, std::uint32_t groups,
                                       std::function<std::int64_t()> clock_ms)
    : clock_ms_(std::move(clock_ms)),
      groups_(groups),
      loads_(nodes),
      down_(nodes, 0),
      subs_(groups),
      group_ops_(groups) {
  for (Group& g : groups_) g.store = std::make_unique<redis::MemoryFleetStore>(clock_ms_);
}

void ShardedMemoryStore::take_over(std::uint32_t node, bool kept) {
  set_node_down(node, false);
  if (kept) return;
  ++generation_;
  for (std::uint32_t g = node; g < groups(); g += nodes()) {
    Group& group = groups_[g];
    group.store->restart();  // its incarnation goes up by one, its sequence back to 0
    group.incarnation = std::to_string(std::stoull(group.incarnation) + 1);
    group.sequence = 0;
    group.known = true;
  }
}

std::optional<redis::FleetRecord> ShardedMemoryStore::record(const std::string& key) const {
  const auto raw = groups_[group_of(key)].store->get_raw(key);
  if (!raw) return std::nullopt;
  auto r = redis::decode_record(*raw);
  if (!r) return std::nullopt;
  return *r;
}

Expected<redis::SyncReply, redis::StoreError> ShardedMemoryStore::exchange(
    const redis::SyncRequest& req, Client& client) {
  const std::uint32_t n = nodes(), gs = groups();
  if (req.ops.empty() && !all_down_ && nodes_down_ == 0 && client.generation == generation_ &&
      req.cursor == client.sequence) {
    // Nothing to send, and no group changed since this client read them all: what the
    // groups' stores and the merge would answer.
    for (std::uint32_t k = 0; k < n; ++k) {
      ++loads_[k].exchanges;
      loads_[k].calls += (gs - k + n - 1) / n;
    }
    redis::SyncReply reply;
    reply.incarnation = client.incarnation;
    reply.sequence = client.sequence;
    reply.server_ms = clock_ms_();
    return reply;
  }
  client.generation = ~std::uint64_t{0};
  redis::detail::GroupMerge& merge = client.merge_;
  op_group_.resize(req.ops.size());
  for (auto& ops : group_ops_) ops.clear();
  for (std::size_t i = 0; i < req.ops.size(); ++i) {
    op_group_[i] = group_of(req.ops[i].key);
    group_ops_[op_group_[i]].push_back(i);
  }
  for (NodeLoad& l : loads_) ++l.exchanges;
  merge.begin(req.cursor);
  sub_.instance = req.instance;
  sub_.now_ms = req.now_ms;
  sub_.quorum = req.quorum;
  sub_.quorum_window_ms = req.quorum_window_ms;
  sub_.max_changes = req.max_changes;
  sub_.count_bucket_ms = req.count_bucket_ms;
  sub_.count_buckets = req.count_buckets;
  sub_.window_ttl_ms = req.window_ttl_ms;
  sub_.deadline = req.deadline;
  std::string partial;
  bool any = false;
  for (std::uint32_t g = 0; g < gs; ++g) {
    Group& group = groups_[g];
    NodeLoad& load = loads_[g % n];
    auto& sub = subs_[g];
    sub.reset();
    if (all_down_ || down_[g % n] != 0) {
      ++load.unanswered;
      load.lost_ops += group_ops_[g].size();
      if (!partial.empty()) partial += "; ";
      partial += "group " + std::to_string(g) + ": node " + std::to_string(g % n) + " is down";
      continue;
    }
    ++load.calls;
    load.ops += group_ops_[g].size();
    any = true;
    const std::uint64_t cursor = merge.cursor(g);
    if (group_ops_[g].empty() && group.known && cursor == group.sequence) {
      // Nothing to send and nothing new to read: what its store would answer.
      sub.emplace();
      sub->incarnation = group.incarnation;
      sub->sequence = group.sequence;
      sub->server_ms = clock_ms_();
      continue;
    }
    sub_.cursor = cursor;
    sub_.ops.clear();
    for (const std::size_t i : group_ops_[g]) sub_.ops.push_back(req.ops[i]);
    auto r = group.store->exchange(sub_);
    if (!r) {  // not down (the model never sets a group's store down): not expected
      if (!partial.empty()) partial += "; ";
      partial += "group " + std::to_string(g) + ": " + r.error().message;
      continue;
    }
    if (r->incarnation != group.incarnation || r->sequence != group.sequence) ++generation_;
    group.incarnation = r->incarnation;
    group.known = r->changes.size() < sub_.max_changes;  // else it may have cut the list
    group.sequence = r->sequence;
    sub = std::move(*r);
  }
  if (!any) {
    return Unexpected(
        redis::StoreError{redis::StoreError::Kind::unavailable,
                          all_down_ ? "the store is down" : "every node is down: " + partial});
  }
  const bool complete = partial.empty();
  redis::SyncReply reply = merge.merge(req, subs_, op_group_, std::move(partial));
  // Caught up: every group read to its newest sequence, and the reply's sequence their
  // sum (not 0 for a group that went back, which the next exchange reads from the start).
  bool caught_up = complete;
  std::uint64_t sum = 0;
  for (std::uint32_t g = 0; g < gs && caught_up; ++g) {
    caught_up = groups_[g].known && merge.cursor(g) == groups_[g].sequence;
    sum += merge.cursor(g);
  }
  caught_up = caught_up && reply.sequence == sum;
  if (caught_up) {
    client.generation = generation_;
    client.incarnation = reply.incarnation;
    client.sequence = reply.sequence;
  }
  return reply;
}

}  // namespace bulwark::lab::detail
