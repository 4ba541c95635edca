#include "sharded_store.h"

#include <algorithm>
#include <utility>

namespace bulwark::lab::detail {

ShardedMemoryStore::ShardedMemoryStore(std::uint32_t nodes, std::uint32_t groups,
                                       std::function<std::int64_t()> clock_ms,
                                       std::int64_t heartbeat_ms)
    : clock_ms_(std::move(clock_ms)),
      groups_(groups),
      loads_(nodes),
      down_(nodes, 0),
      heartbeat_ms_(heartbeat_ms),
      connection_(nodes, 0),
      subs_(groups),
      group_ops_(groups),
      read_stamp_(nodes, 0) {
  for (Group& g : groups_) g.store = std::make_unique<redis::MemoryFleetStore>(clock_ms_);
}

void ShardedMemoryStore::take_over(std::uint32_t node, bool kept) {
  if (down_[node] != 0) {
    set_node_down(node, false);
  } else {
    reconnect(node);  // another server: a new connection
  }
  if (kept) return;
  ++generation_;
  for (std::uint32_t g = node; g < groups(); g += nodes()) {
    Group& group = groups_[g];
    group.store->restart();  // its incarnation goes up by one, its sequence back to 0
    group.incarnation = std::to_string(std::stoull(group.incarnation) + 1);
    group.sequence = 0;
    group.known = true;
    ++group.epoch;
  }
}

bool ShardedMemoryStore::script_due(const Client& client, std::uint32_t g,
                                    std::int64_t now_ms) const {
  const std::uint32_t k = g % nodes();
  return client.script_epoch_[g] != groups_[g].epoch || client.connection_[k] != connection_[k] ||
         now_ms < client.script_ms_[g] || now_ms - client.script_ms_[g] >= heartbeat_ms_;
}

void ShardedMemoryStore::count_call(Client& client, std::uint32_t g, bool script,
                                    std::int64_t now_ms) {
  NodeLoad& load = loads_[g % nodes()];
  ++load.calls;
  if (script) {
    ++load.scripts;
    client.script_epoch_[g] = groups_[g].epoch;
    client.script_ms_[g] = now_ms;
  } else {
    ++load.reads;
    if (read_stamp_[g % nodes()] != exchange_no_) {
      read_stamp_[g % nodes()] = exchange_no_;
      ++load.read_exchanges;
    }
  }
}

void ShardedMemoryStore::after_calls(Client& client) {
  for (std::uint32_t k = 0; k < nodes(); ++k) {
    if (!all_down_ && down_[k] == 0) client.connection_[k] = connection_[k];
  }
  std::int64_t earliest = client.script_ms_.empty() ? 0 : client.script_ms_[0];
  std::int64_t latest = earliest;
  for (const std::int64_t t : client.script_ms_) {
    earliest = std::min(earliest, t);
    latest = std::max(latest, t);
  }
  client.next_heartbeat_ms_ = earliest + heartbeat_ms_;
  client.latest_script_ms_ = latest;
  client.reconnects_ = reconnects_;
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
    // groups' stores and the merge would answer. Every group gets the cheap read unless
    // a connection is new or a heartbeat is due.
    ++exchange_no_;
    if (client.reconnects_ == reconnects_ && req.now_ms < client.next_heartbeat_ms_ &&
        req.now_ms >= client.latest_script_ms_) {
      for (std::uint32_t k = 0; k < n; ++k) {
        NodeLoad& load = loads_[k];
        const std::uint32_t held = (gs - k + n - 1) / n;
        ++load.exchanges;
        load.calls += held;
        load.reads += held;
        ++load.read_exchanges;
      }
    } else {
      for (std::uint32_t k = 0; k < n; ++k) ++loads_[k].exchanges;
      for (std::uint32_t g = 0; g < gs; ++g)
        count_call(client, g, script_due(client, g, req.now_ms), req.now_ms);
      after_calls(client);
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
  ++exchange_no_;
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
    load.ops += group_ops_[g].size();
    any = true;
    const std::uint64_t cursor = merge.cursor(g);
    const bool quiet = group_ops_[g].empty() && group.known && cursor == group.sequence;
    // Decided on what the client knew before the call; counted after it (a script
    // records the incarnation it answered with).
    const bool script = !quiet || script_due(client, g, req.now_ms);
    if (quiet) {
      count_call(client, g, script, req.now_ms);
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
    if (r && r->incarnation != group.incarnation) ++group.epoch;
    count_call(client, g, script, req.now_ms);
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
  after_calls(client);
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
