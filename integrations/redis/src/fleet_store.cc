#include "bulwark/redis/fleet_store.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>
#include <thread>

namespace bulwark::redis {
namespace {

constexpr TransitionReason kReasons[] = {
    TransitionReason::consecutive_failures,
    TransitionReason::failure_rate,
    TransitionReason::slow_call_rate,
    TransitionReason::open_period_elapsed,
    TransitionReason::probes_succeeded,
    TransitionReason::probe_failed,
    TransitionReason::manual,
    TransitionReason::fleet_opened,
    TransitionReason::fleet_closed,
};

template <class T>
bool parse_number(std::string_view s, T& out) {
  if (s.empty() || s.size() > 20) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 40) out += "...";
  return out + "'";
}

// One instance's window entry, "calls|failures|slow|ms", each at most 15 digits (what a
// Lua number holds exactly).
struct WindowEntry {
  std::uint64_t calls, failures, slow;
  std::int64_t ms;
};
std::optional<WindowEntry> parse_window_entry(std::string_view text) {
  std::string_view parts[4];
  std::size_t n = 0;
  for (;;) {
    const std::size_t bar = text.find('|');
    if (n == 4) return std::nullopt;
    parts[n++] = text.substr(0, bar);
    if (bar == std::string_view::npos) break;
    text.remove_prefix(bar + 1);
  }
  if (n != 4) return std::nullopt;
  for (auto p : parts) {
    if (p.empty() || p.size() > 15 || p.find_first_not_of("0123456789") != p.npos)
      return std::nullopt;
  }
  WindowEntry e{};
  if (!parse_number(parts[0], e.calls) || !parse_number(parts[1], e.failures) ||
      !parse_number(parts[2], e.slow) || !parse_number(parts[3], e.ms))
    return std::nullopt;
  if (e.failures > e.calls || e.slow > e.calls) return std::nullopt;
  return e;
}

// a - b, saturated at the int64 range.
std::int64_t saturating_diff(std::int64_t a, std::int64_t b) {
  std::int64_t d = 0;
  if (!__builtin_sub_overflow(a, b, &d)) return d;
  return b < 0 ? std::numeric_limits<std::int64_t>::max()
               : std::numeric_limits<std::int64_t>::min();
}

// The longest remaining open period a store keeps (2^50 ms, what the Redis script keeps
// exactly), so that converting an op's until_ms cannot overflow.
constexpr std::int64_t kMaxLeftMs = std::int64_t{1} << 50;

std::int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool valid_instance_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::optional<TransitionReason> parse_reason(std::string_view name) noexcept {
  for (TransitionReason r : kReasons) {
    if (to_string(r) == name) return r;
  }
  return std::nullopt;
}

std::string encode_record(const FleetRecord& r) {
  std::string out = "v1|";
  out += to_string(r.state);
  out += '|';
  out += to_string(r.reason);
  out += '|';
  out += std::to_string(r.until_ms);
  out += '|';
  out += r.instance;
  out += '|';
  out += std::to_string(r.sequence);
  if (r.fleet_window) out += "|window";
  return out;
}

Expected<FleetRecord, std::string> decode_record(std::string_view text) {
  std::string_view parts[7];
  std::size_t n = 0;
  std::string_view rest = text;
  for (;;) {
    const std::size_t bar = rest.find('|');
    if (n == 7) return Unexpected("has more than 7 '|'-separated fields: " + quoted(text));
    parts[n++] = rest.substr(0, bar);
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  if (n != 6 && n != 7) {
    return Unexpected("is not a bulwark fleet record (want 6 '|'-separated fields, got " +
                      std::to_string(n) + "): " + quoted(text));
  }
  if (parts[0] != "v1") return Unexpected("has an unknown version " + quoted(parts[0]));
  FleetRecord r;
  if (parts[1] == "open") {
    r.state = SharedState::open;
  } else if (parts[1] == "closed") {
    r.state = SharedState::closed;
  } else {
    return Unexpected("has an unknown state " + quoted(parts[1]) + " (want open or closed)");
  }
  const auto reason = parse_reason(parts[2]);
  if (!reason) return Unexpected("has an unknown reason " + quoted(parts[2]));
  r.reason = *reason;
  if (!parse_number(parts[3], r.until_ms) || r.until_ms < 0) {
    return Unexpected("has an until_ms that is not a non-negative integer: " + quoted(parts[3]));
  }
  if (r.state == SharedState::open && r.until_ms == 0) {
    return Unexpected("is open with until_ms 0");
  }
  if (!valid_instance_id(parts[4])) {
    return Unexpected("has an invalid instance id " + quoted(parts[4]));
  }
  r.instance = std::string(parts[4]);
  if (!parse_number(parts[5], r.sequence) || r.sequence == 0) {
    return Unexpected("has a sequence that is not a positive integer: " + quoted(parts[5]));
  }
  if (n == 7) {
    if (parts[6] != "window")
      return Unexpected("has an unknown seventh field " + quoted(parts[6]) + " (want window)");
    if (r.state != SharedState::open || (r.reason != TransitionReason::failure_rate &&
                                         r.reason != TransitionReason::slow_call_rate))
      return Unexpected("is marked window but is not an open by failure_rate or slow_call_rate");
    r.fleet_window = true;
  }
  return r;
}

// ---------------------------------------------------------------------------

MemoryFleetStore::MemoryFleetStore(std::function<std::int64_t()> lease_clock_ms)
    : lease_clock_ms_(lease_clock_ms ? std::move(lease_clock_ms) : system_ms) {}

void MemoryFleetStore::set_down(bool down) {
  std::lock_guard lock(mu_);
  down_ = down;
}
void MemoryFleetStore::set_latency(std::chrono::nanoseconds latency) {
  std::lock_guard lock(mu_);
  latency_ = latency;
}
void MemoryFleetStore::restart() {
  std::lock_guard lock(mu_);
  ++incarnation_;
  sequence_ = 0;
  records_.clear();
  changed_.clear();
  by_sequence_.clear();
  votes_.clear();
  leases_.clear();
  counts_.clear();
  windows_.clear();
}
void MemoryFleetStore::put_raw(const std::string& key, std::string value) {
  std::lock_guard lock(mu_);
  records_[key] = std::move(value);
  touch(key, ++sequence_);
}

void MemoryFleetStore::erase_raw(const std::string& key) {
  std::lock_guard lock(mu_);
  records_.erase(key);
}

void MemoryFleetStore::put_raw_window(const std::string& key, const std::string& instance,
                                      std::string value) {
  std::lock_guard lock(mu_);
  Window& w = windows_[key];
  w.entries[instance] = std::move(value);
  w.dirty = true;
}

void MemoryFleetStore::touch(const std::string& key, std::uint64_t sequence) {
  auto [it, fresh] = changed_.try_emplace(key, sequence);
  if (!fresh) {
    by_sequence_.erase(it->second);
    it->second = sequence;
  }
  by_sequence_.emplace(sequence, key);
}
std::optional<std::string> MemoryFleetStore::get_raw(const std::string& key) const {
  std::lock_guard lock(mu_);
  const auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}
std::uint64_t MemoryFleetStore::exchanges() const {
  std::lock_guard lock(mu_);
  return exchanges_;
}

void MemoryFleetStore::record(const std::string& key, SharedState state, TransitionReason reason,
                              std::int64_t until_ms, const std::string& instance,
                              bool fleet_window) {
  FleetRecord r{state, reason, until_ms, instance, ++sequence_, fleet_window};
  records_[key] = encode_record(r);
  touch(key, r.sequence);
}

Expected<SyncReply, StoreError> MemoryFleetStore::exchange(const SyncRequest& req) {
  std::chrono::nanoseconds latency;
  {
    std::lock_guard lock(mu_);
    latency = latency_;
  }
  if (latency > std::chrono::nanoseconds::zero()) {
    const auto now = std::chrono::steady_clock::now();
    if (req.deadline != std::chrono::steady_clock::time_point::max() &&
        req.deadline - now < latency) {
      std::this_thread::sleep_until(req.deadline);
      return Unexpected(StoreError{StoreError::Kind::timeout, "no answer by the deadline"});
    }
    std::this_thread::sleep_for(latency);
  }
  std::lock_guard lock(mu_);
  ++exchanges_;
  if (down_) return Unexpected(StoreError{StoreError::Kind::unavailable, "the store is down"});
  // The store's clock: every time kept here is read from it. An op's until_ms is the
  // sender's; only its distance from the sender's now_ms is kept (at least 0).
  const std::int64_t lease_now = lease_clock_ms_();
  auto until = [&](const FleetOp& op) {
    const std::int64_t left =
        std::clamp<std::int64_t>(saturating_diff(op.until_ms, req.now_ms), 0, kMaxLeftMs);
    return lease_now + left;
  };
  SyncReply reply;
  reply.server_ms = lease_now;
  // The current record's state and end, if it is a valid record; a value that is not
  // one is removed and reported.
  auto current = [&](const std::string& key) -> std::optional<FleetRecord> {
    const auto it = records_.find(key);
    if (it == records_.end()) return std::nullopt;
    auto r = decode_record(it->second);
    if (!r) {
      reply.repairs.push_back("k:" + key + " held a value that " + r.error() + ": removed");
      records_.erase(it);
      return std::nullopt;
    }
    return *r;
  };
  // An open the sender would replace: it ends later than its bound allows.
  auto out_of_bounds = [&](const FleetRecord& r, const FleetOp& op) {
    return op.max_open_ms > 0 && saturating_diff(r.until_ms, lease_now) > op.max_open_ms;
  };
  auto holder = [&](const std::string& key) -> std::string {
    const auto it = leases_.find(key);
    if (it == leases_.end()) return "";
    if (it->second.expires_ms <= lease_now) {
      leases_.erase(it);
      return "";
    }
    return it->second.holder;
  };
  for (const FleetOp& op : req.ops) {
    const std::uint64_t before = sequence_;
    switch (op.kind) {
      case FleetOp::Kind::vote_open: {
        auto& voters = votes_[op.key];
        voters[req.instance] = lease_now;
        std::erase_if(voters,
                      [&](const auto& v) { return v.second <= lease_now - req.quorum_window_ms; });
        const auto cur = current(op.key);
        const bool qualifies = holder(op.key) == req.instance || voters.size() >= req.quorum;
        if (qualifies && !(cur && cur->state == SharedState::open && cur->until_ms >= until(op) &&
                           !out_of_bounds(*cur, op))) {
          record(op.key, SharedState::open, op.reason, until(op), req.instance);
          leases_.erase(op.key);
        }
        break;
      }
      case FleetOp::Kind::close: {
        const auto cur = current(op.key);
        if (cur && cur->state == SharedState::open) {
          record(op.key, SharedState::closed, op.reason, 0, req.instance);
        }
        leases_.erase(op.key);
        votes_.erase(op.key);
        break;
      }
      case FleetOp::Kind::assert_open: {
        const auto cur = current(op.key);
        const auto listed = changed_.find(op.key);
        const bool newer = listed != changed_.end() && listed->second > op.known_sequence;
        if (!cur ? !newer : listed == changed_.end())
          record(op.key, SharedState::open, op.reason, until(op), req.instance, op.fleet_window);
        break;
      }
      case FleetOp::Kind::lease: {
        if (holder(op.key).empty()) leases_[op.key] = Lease{req.instance, lease_now + op.lease_ms};
        reply.lease_holders.push_back(holder(op.key));
        break;
      }
      case FleetOp::Kind::count: {
        if (req.count_bucket_ms <= 0 || req.count_buckets == 0) {
          reply.counts.push_back({"0", "0"});
          break;
        }
        const std::int64_t bucket = lease_now / req.count_bucket_ms;
        const std::int64_t oldest = bucket - static_cast<std::int64_t>(req.count_buckets) + 1;
        auto& buckets = counts_[op.key];
        auto& cell = buckets[bucket];
        cell.first += op.successes;
        cell.second += op.failures;
        std::erase_if(buckets, [&](const auto& b) { return b.first < oldest; });
        std::uint64_t s = 0, f = 0;
        for (const auto& [b, c] : buckets) {
          if (b <= bucket) s += c.first, f += c.second;
        }
        reply.counts.push_back({std::to_string(s), std::to_string(f)});
        break;
      }
      case FleetOp::Kind::window: {
        Window& w = windows_[op.key];
        const std::int64_t cutoff = lease_now - req.window_ttl_ms;
        std::string bad;
        // Removes a counted entry from the sum (false if it is unreadable).
        auto uncount = [&w](const std::string& entry) {
          const auto level = parse_window_entry(entry);
          if (!level || level->calls > w.calls || level->failures > w.failures ||
              level->slow > w.slow || w.counted == 0)
            return false;
          w.calls -= level->calls, w.failures -= level->failures, w.slow -= level->slow;
          --w.counted;
          return true;
        };
        bool again = w.dirty;
        // The stale ones, oldest first, through their times.
        while (!again && !w.by_ms.empty() && w.by_ms.begin()->first <= cutoff) {
          const std::string who = w.by_ms.begin()->second;
          w.by_ms.erase(w.by_ms.begin());
          const auto it = w.entries.find(who);
          if (it == w.entries.end() || !uncount(it->second)) again = true;
          if (it != w.entries.end()) w.entries.erase(it);
        }
        // The sender's own entry is replaced.
        if (const auto it = w.entries.find(req.instance); it != w.entries.end()) {
          if (const auto level = parse_window_entry(it->second)) {
            auto [lo, hi] = w.by_ms.equal_range(level->ms);
            for (; lo != hi; ++lo) {
              if (lo->second == req.instance) {
                w.by_ms.erase(lo);
                break;
              }
            }
          }
          if (!again && !uncount(it->second)) again = true;
          w.entries.erase(it);
        }
        if (op.calls != 0) {
          w.entries[req.instance] = std::to_string(op.calls) + '|' + std::to_string(op.failures) +
                                    '|' + std::to_string(op.slow) + '|' + std::to_string(lease_now);
          w.by_ms.emplace(lease_now, req.instance);
          w.calls += op.calls, w.failures += op.failures, w.slow += op.slow;
          ++w.counted;
        }
        if (again) {
          // Re-sum every entry: the readable fresh ones count, the others are dropped.
          w.calls = w.failures = w.slow = w.counted = 0;
          w.by_ms.clear();
          w.dirty = false;
          for (auto it = w.entries.begin(); it != w.entries.end();) {
            const auto level = parse_window_entry(it->second);
            if (!level || level->ms > lease_now) {  // unreadable, or stamped in the future
              if (bad.empty()) bad = "malformed|" + it->first + '=' + it->second;
              it = w.entries.erase(it);
            } else if (level->ms <= cutoff) {
              it = w.entries.erase(it);
            } else {
              w.calls += level->calls, w.failures += level->failures, w.slow += level->slow;
              ++w.counted;
              w.by_ms.emplace(level->ms, it->first);
              ++it;
            }
          }
        }
        reply.windows.push_back(
            !bad.empty() ? bad
                         : std::to_string(w.calls) + '|' + std::to_string(w.failures) + '|' +
                               std::to_string(w.slow) + '|' + std::to_string(w.counted));
        if (w.entries.empty()) windows_.erase(op.key);
        break;
      }
      case FleetOp::Kind::window_open: {
        const auto cur = current(op.key);
        if (!(cur && cur->state == SharedState::open && cur->until_ms >= until(op) &&
              !out_of_bounds(*cur, op))) {
          record(op.key, SharedState::open, op.reason, until(op), req.instance, true);
          leases_.erase(op.key);
        }
        break;
      }
    }
    reply.written.push_back(sequence_ != before ? sequence_ : 0);
  }
  reply.incarnation = std::to_string(incarnation_);
  reply.sequence = sequence_;
  // Every change after the cursor, oldest first. A change whose record is gone (lost,
  // or removed above as not a record) leaves the list: the key is closed for the fleet.
  std::uint32_t listed = 0;
  for (auto it = by_sequence_.upper_bound(req.cursor); it != by_sequence_.end();) {
    if (listed >= req.max_changes) {
      reply.sequence = std::prev(it)->first;  // the rest next time
      break;
    }
    const std::string key = it->second;
    if (!current(key)) {
      changed_.erase(key);
      it = by_sequence_.erase(it);
      continue;
    }
    ++listed;
    reply.changes.push_back(RawRecord{key, records_.at(key)});
    ++it;
  }
  return reply;
}

}  // namespace bulwark::redis
