#include "bulwark/redis/detail/group_merge.h"

#include <algorithm>
#include <utility>

namespace bulwark::redis::detail {

std::uint32_t group_of(std::string_view key, std::uint32_t groups) noexcept {
  std::uint32_t h = 2166136261u;
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h % groups;
}

void GroupMerge::begin(std::uint64_t request_cursor) {
  if (request_cursor == 0 || request_cursor != last_sequence_) {
    for (Group& g : groups_) g.cursor = 0;
  }
}

SyncReply GroupMerge::merge(const SyncRequest& req, std::vector<std::optional<SyncReply>>& subs,
                            const std::vector<std::uint32_t>& op_group, std::string partial) {
  const std::size_t groups = groups_.size();
  SyncReply out;
  out.partial_error = std::move(partial);
  bool went_back = false;
  for (std::size_t g = 0; g < groups; ++g) {
    if (!subs[g]) continue;
    SyncReply& sub = *subs[g];
    if (out.server_ms == 0 && sub.server_ms > 0) out.server_ms = sub.server_ms;
    if (sub.sequence < groups_[g].cursor) went_back = true;
    groups_[g].cursor = sub.sequence;
    groups_[g].incarnation = sub.incarnation;
  }
  std::uint64_t sum = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    if (g > 0) out.incarnation += '/';
    out.incarnation += groups_[g].incarnation.empty() ? "?" : groups_[g].incarnation;
    sum += groups_[g].cursor;
  }
  out.sequence = went_back ? 0 : sum;
  last_sequence_ = out.sequence;
  // Per op, in the request's order, from its group's reply (or a placeholder, lost).
  std::vector<std::size_t> at_lease(groups), at_count(groups), at_window(groups), at_op(groups);
  if (!out.partial_error.empty()) out.lost.assign(req.ops.size(), 0);
  for (std::size_t i = 0; i < req.ops.size(); ++i) {
    const FleetOp& op = req.ops[i];
    const std::uint32_t g = op_group[i];
    if (!subs[g]) {
      out.lost[i] = 1;
      out.written.push_back(0);
      if (op.kind == FleetOp::Kind::lease) out.lease_holders.emplace_back();
      if (op.kind == FleetOp::Kind::count) out.counts.push_back({"0", "0"});
      if (op.kind == FleetOp::Kind::window) out.windows.emplace_back("0|0|0|0");
      continue;
    }
    SyncReply& sub = *subs[g];
    out.written.push_back(sub.written[at_op[g]++]);
    if (op.kind == FleetOp::Kind::lease)
      out.lease_holders.push_back(sub.lease_holders[at_lease[g]++]);
    if (op.kind == FleetOp::Kind::count) out.counts.push_back(sub.counts[at_count[g]++]);
    if (op.kind == FleetOp::Kind::window) out.windows.push_back(sub.windows[at_window[g]++]);
  }
  for (std::size_t g = 0; g < groups; ++g) {
    if (!subs[g]) continue;
    SyncReply& sub = *subs[g];
    for (std::string& r : sub.repairs) out.repairs.push_back(std::move(r));
    // Opens in this group's node's clock, moved to the reply's (the first group's).
    const std::int64_t shift = sub.server_ms > 0 ? out.server_ms - sub.server_ms : 0;
    for (RawRecord& change : sub.changes) {
      if (shift != 0) {
        auto rec = decode_record(change.value);
        if (rec && rec->state == SharedState::open) {
          rec->until_ms = std::max<std::int64_t>(rec->until_ms + shift, 1);
          change.value = encode_record(*rec);
        }
      }
      out.changes.push_back(std::move(change));
    }
  }
  return out;
}

}  // namespace bulwark::redis::detail
