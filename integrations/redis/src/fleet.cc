#include "bulwark/redis/fleet.h"

#include <algorithm>
#include <charconv>
#include <iterator>

#include "bulwark/config_error.h"

namespace bulwark::redis {
namespace {

std::int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void bad(const FleetConfig& c, std::string field, std::string message) {
  detail::raise_config_error(
      ConfigError{"fleet '" + c.instance + "'", std::move(field), std::move(message)});
}

bool opened(State s) { return s == State::open || s == State::half_open; }

bool parse_count(std::string_view text, std::uint64_t& out) {
  if (text.empty() || text.size() > 20) return false;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 80) out += "...";
  return out + "'";
}

struct WindowTotals {
  std::uint64_t calls, failures, slow;
  std::uint32_t instances;
};

// A store's window totals, "calls|failures|slow|instances": four counts, with failures
// and slow calls each at most the calls.
Expected<WindowTotals, std::string> parse_window(std::string_view text) {
  std::string_view parts[4];
  std::size_t n = 0;
  std::string_view rest = text;
  for (;;) {
    const std::size_t bar = rest.find('|');
    if (n == 4) break;
    parts[n++] = rest.substr(0, bar);
    if (bar == std::string_view::npos) {
      rest = {};
      break;
    }
    rest.remove_prefix(bar + 1);
  }
  WindowTotals t{};
  std::uint64_t instances = 0;
  if (n != 4 || !rest.empty() || !parse_count(parts[0], t.calls) ||
      !parse_count(parts[1], t.failures) || !parse_count(parts[2], t.slow) ||
      !parse_count(parts[3], instances) || instances > 0xffffffffu) {
    return Unexpected("holds a value that is not calls|failures|slow|instances: " + quoted(text));
  }
  if (t.failures > t.calls || t.slow > t.calls) {
    return Unexpected("holds more failures or slow calls than calls: " + quoted(text));
  }
  t.instances = static_cast<std::uint32_t>(instances);
  return t;
}

constexpr std::size_t kRttBuckets = std::size(FleetReading::kRttBucketsMs) + 1;

}  // namespace

Fleet::Fleet(FleetConfig config, FleetStore& store) : config_(std::move(config)), store_(store) {
  if (!valid_instance_id(config_.instance))
    bad(config_, "instance", "must be 1-64 characters from [A-Za-z0-9._:-]");
  if (config_.quorum == 0) bad(config_, "quorum", "must be at least 1");
  if (config_.quorum_window <= std::chrono::milliseconds::zero())
    bad(config_, "quorum_window", "must be positive");
  if (config_.sync_interval <= std::chrono::milliseconds::zero())
    bad(config_, "sync_interval", "must be positive");
  if (config_.lease_duration <= std::chrono::milliseconds::zero())
    bad(config_, "lease_duration", "must be positive");
  if (config_.queue_capacity == 0) bad(config_, "queue_capacity", "must be at least 1");
  if (config_.max_changes_per_sync == 0 || config_.max_changes_per_sync > 100000)
    bad(config_, "max_changes_per_sync", "must be in 1..100000");
  if (config_.count_bucket < std::chrono::milliseconds::zero())
    bad(config_, "count_bucket", "must not be negative");
  if (config_.count_bucket > std::chrono::milliseconds::zero() &&
      (config_.count_buckets == 0 || config_.count_buckets > 1000))
    bad(config_, "count_buckets", "must be in 1..1000");
  if (!config_.wall_ms) config_.wall_ms = system_ms;
  queue_.reserve(config_.queue_capacity);
  draining_.reserve(config_.queue_capacity);
  counters_.instance = config_.instance;
  counters_.rtt_counts.assign(kRttBuckets, 0);
}

Fleet::~Fleet() {
  for (auto& remove : unlisten_) remove();
}

void Fleet::add_member(Member m, const void* policy_id,
                       const std::function<std::function<void()>()>& listen) {
  if (m.key.empty() || m.key.size() > 512)
    bad(config_, "key", "must be 1-512 bytes, got " + std::to_string(m.key.size()));
  std::lock_guard state(state_mu_);
  if (by_key_.count(m.key) != 0) bad(config_, "key", "'" + m.key + "' is already attached");
  const auto index = static_cast<std::uint32_t>(members_.size());
  const void* breaker = m.breaker;
  {
    std::lock_guard queue(queue_mu_);
    if (by_breaker_.count(breaker) != 0)
      bad(config_, "key", "'" + m.key + "': that breaker is already attached");
  }
  by_key_.emplace(m.key, index);
  members_.push_back(std::make_unique<Member>(std::move(m)));
  const std::string* key = &members_.back()->key;
  if (!listened_policies_[policy_id]) {
    unlisten_.push_back(listen());
    listened_policies_[policy_id] = true;
  }
  std::lock_guard queue(queue_mu_);
  by_breaker_.emplace(breaker, Attached{index, key});
}

// On the thread that made the transition. Bounded: a lookup and a push into reserved
// storage under a mutex that sync() holds only to swap two vectors.
void Fleet::on_transition(const TransitionEvent& e) noexcept {
  if (e.reason == TransitionReason::fleet_opened || e.reason == TransitionReason::fleet_closed)
    return;  // the fleet's own decision coming back
  const bool to_open = e.to == State::open;
  const bool to_closed = e.to == State::closed && opened(e.from);
  if (!to_open && !to_closed) return;
  // This instance's wall clock: the store keeps only until - SyncRequest::now_ms of it.
  const std::int64_t until =
      to_open ? config_.wall_ms() +
                    std::chrono::duration_cast<std::chrono::milliseconds>(e.open_duration).count()
              : 0;
  const std::string* key = nullptr;
  {
    std::lock_guard lock(queue_mu_);
    const auto it = by_breaker_.find(e.breaker);
    if (it == by_breaker_.end()) return;  // another breaker of the same policy
    key = it->second.key;
    if (queue_.size() >= config_.queue_capacity) {
      overflowed_ = true;
    } else {
      queue_.push_back(Queued{it->second.member, e.to, e.reason, until});
    }
  }
  if (config_.on_queued) config_.on_queued(*key, e.to);
}

void Fleet::reject_fleet_window(const std::string& key) const {
  bad(config_, "fleet_window",
      "key '" + key + "': the breaker has no sliding window to judge fleet-wide");
}

Expected<SyncSummary, StoreError> Fleet::sync() {
  if (syncing_.exchange(true, std::memory_order_acquire)) {
    return Unexpected(
        StoreError{StoreError::Kind::unavailable, "sync() is already running on another thread"});
  }
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false, std::memory_order_release); }
  } done{syncing_};
  auto first = exchange_once(true);
  if (!first || first->window_trips == 0) return first;
  // A fleet window tripped here: share the open now rather than a sync later. Only the
  // window_open ops (and anything queued meanwhile) go out.
  auto second = exchange_once(false);
  if (!second) return first;  // the open is sent again by the next sync
  first->published += second->published;
  first->changes += second->changes;
  first->adopted += second->adopted;
  first->malformed += second->malformed;
  first->window_trips += second->window_trips;
  return first;
}

Expected<SyncSummary, StoreError> Fleet::exchange_once(bool counts_as_sync) {
  SyncSummary summary;
  SyncRequest req;
  bool overflow = false;
  {
    std::lock_guard queue(queue_mu_);
    draining_.clear();
    std::swap(queue_, draining_);
    overflow = overflowed_;
    overflowed_ = false;
  }
  std::unique_lock state(state_mu_);
  if (counts_as_sync) ++counters_.syncs;
  if (overflow) {
    ++counters_.dropped_transitions;
    rescan_ = true;
  }
  // This instance's wall clock: the reference the ops' until_ms are sent in (the store
  // converts them to its own clock), and the time this instance last sent its window
  // levels. Compared with the store's times only through store_offset_ms_.
  const std::int64_t now = wall_now();
  req.instance = config_.instance;
  req.now_ms = now;
  req.quorum = config_.quorum;
  req.quorum_window_ms = config_.quorum_window.count();
  req.cursor = cursor_;
  req.max_changes = config_.max_changes_per_sync;
  // What happened locally.
  for (const Queued& q : draining_) {
    Member& m = *members_[q.member];
    if (q.to == State::open) {
      m.decision = Decision::local;
      req.ops.push_back({FleetOp::Kind::vote_open, m.key, q.reason, q.until_ms, 0});
    } else {
      m.decision = Decision::local;
      m.lease_holder = false;
      req.ops.push_back({FleetOp::Kind::close, m.key, q.reason, 0, 0});
    }
  }
  // After lost transitions or a failed sync: re-read every breaker. After the store
  // lost its contents: publish again what is still open here.
  if (rescan_ || republish_) {
    for (const auto& mp : members_) {
      Member& m = *mp;
      const State s = m.state();
      if (s == State::open) {
        if (m.window_open_pending) continue;  // its window_open goes out below
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(m.remaining()).count();
        if (left <= 0) continue;
        // A shared open the store lost goes back without a quorum (a fleet window's
        // keeps its mark).
        const auto kind = !(republish_ && m.shared_open) ? FleetOp::Kind::vote_open
                          : m.record.fleet_window        ? FleetOp::Kind::window_open
                                                         : FleetOp::Kind::assert_open;
        const TransitionReason reason =
            m.shared_open ? m.record.reason : TransitionReason::consecutive_failures;
        req.ops.push_back({kind, m.key, reason, now + left, 0});
      } else if (s == State::closed && m.shared_open && rescan_) {
        req.ops.push_back({FleetOp::Kind::close, m.key, TransitionReason::probes_succeeded, 0, 0});
      }
    }
  }
  // Half-open leases due: near the end of a shared open period.
  std::vector<std::uint32_t> leased;
  const std::int64_t lead = 2 * config_.sync_interval.count();
  for (std::uint32_t i = 0; i < members_.size(); ++i) {
    Member& m = *members_[i];
    if (!m.shared_open || m.lease_asked == m.record.sequence) continue;
    // The record's end is the store's: compared with the store's time now, as estimated
    // from the last reply.
    if (now + store_offset_ms_ < m.record.until_ms - lead || !opened(m.state())) continue;
    req.ops.push_back(
        {FleetOp::Kind::lease, m.key, m.record.reason, 0, config_.lease_duration.count()});
    leased.push_back(i);
  }
  // Fleet-wide counts: what each breaker completed since the last successful count.
  struct Counted {
    std::uint32_t member;
    std::uint64_t successes, failures;
  };
  std::vector<Counted> counted;
  if (config_.count_bucket > std::chrono::milliseconds::zero()) {
    req.count_bucket_ms = config_.count_bucket.count();
    req.count_buckets = config_.count_buckets;
    for (std::uint32_t i = 0; i < members_.size(); ++i) {
      Member& m = *members_[i];
      const auto [succ, fail] = m.totals();
      const std::uint64_t ds = succ - m.counted_successes, df = fail - m.counted_failures;
      if (ds == 0 && df == 0) continue;
      FleetOp op{FleetOp::Kind::count, m.key};
      op.successes = ds;
      op.failures = df;
      req.ops.push_back(std::move(op));
      counted.push_back({i, succ, fail});
    }
  }
  // Fleet windows: the opens they caused, and every level that changed (or that the
  // store would soon forget: a level unchanged for two sync intervals is sent again).
  std::vector<std::uint32_t> windowed;
  std::vector<Level> levels;
  for (std::uint32_t i = 0; i < members_.size(); ++i) {
    Member& m = *members_[i];
    if (!m.fleet_window) continue;
    if (m.window_open_pending) {
      FleetOp op{FleetOp::Kind::window_open, m.key, m.window_reason, m.window_until_ms};
      req.ops.push_back(std::move(op));
    }
    const Level level = m.level();
    const bool refresh = level.calls != 0 && now - m.sent_ms >= 2 * config_.sync_interval.count();
    if (level == m.sent && !refresh) continue;
    FleetOp op{FleetOp::Kind::window, m.key};
    op.calls = level.calls;
    op.failures = level.failures;
    op.slow = level.slow;
    req.ops.push_back(std::move(op));
    windowed.push_back(i);
    levels.push_back(level);
  }
  if (!windowed.empty()) req.window_ttl_ms = 3 * config_.sync_interval.count();
  summary.published = req.ops.size();
  state.unlock();

  const auto t0 = std::chrono::steady_clock::now();
  auto reply = store_.exchange(req);
  const auto t1 = std::chrono::steady_clock::now();

  state.lock();
  if (!reply) {
    ++counters_.sync_errors;
    counters_.connected = false;
    counters_.last_error =
        std::string(to_string(reply.error().kind)) + ": " + reply.error().message;
    rescan_ = true;  // what was sent may be lost: re-read everything next time
    return Unexpected(reply.error());
  }
  const double rtt_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  std::size_t bucket = 0;
  while (bucket + 1 < kRttBuckets && rtt_ms > FleetReading::kRttBucketsMs[bucket]) ++bucket;
  ++counters_.rtt_counts[bucket];
  counters_.rtt_sum_ms += rtt_ms;
  counters_.connected = true;
  last_success_ = t1;
  ever_synced_ = true;
  if (reply->server_ms <= 0) {
    // Without the store's time no until_ms in the reply can be read: the reply is
    // refused whole, and what was sent goes again next time (every op is idempotent
    // but counts, which the store has added: those are not sent again).
    for (const Counted& c : counted) {
      members_[c.member]->counted_successes = c.successes;
      members_[c.member]->counted_failures = c.failures;
    }
    ++summary.malformed;
    ++counters_.malformed_values;
    counters_.last_malformed = "the store's reply has no valid time (server_ms " +
                               std::to_string(reply->server_ms) +
                               ", want a positive Unix ms): the reply is refused";
    rescan_ = true;
    return summary;
  }
  rescan_ = false;
  republish_ = false;

  // This instance's wall clock, after the exchange: the reference the window opens
  // decided below are sent in (as `now` above). The reply's times are the store's and
  // are read against reply->server_ms, never against this clock.
  const std::int64_t after = wall_now();
  const std::int64_t server_now = reply->server_ms;
  store_offset_ms_ = server_now - after;
  if (!incarnation_.empty() && reply->incarnation != incarnation_) {
    // The store started again empty: read it from the start, and publish again.
    republish_ = true;
    cursor_ = 0;
  } else {
    cursor_ = reply->sequence;
  }
  incarnation_ = reply->incarnation;

  const std::size_t n_leases = std::min(leased.size(), reply->lease_holders.size());
  for (std::size_t i = 0; i < n_leases; ++i) {
    Member& m = *members_[leased[i]];
    const std::string& holder = reply->lease_holders[i];
    if (holder.empty()) continue;  // expired in between: ask again next time
    m.lease_asked = m.record.sequence;
    m.lease_holder = holder == config_.instance;
    if (!m.lease_holder) {
      // Someone else probes: stay open until its verdict or the lease's end.
      if (m.adopt_open(std::chrono::milliseconds(config_.lease_duration))) ++summary.adopted;
    }
  }

  const std::size_t n_counts = std::min(counted.size(), reply->counts.size());
  for (std::size_t i = 0; i < n_counts; ++i) {
    Member& m = *members_[counted[i].member];
    m.counted_successes = counted[i].successes;
    m.counted_failures = counted[i].failures;
    const auto& raw = reply->counts[i];
    std::uint64_t s = 0, f = 0;
    if (!parse_count(raw.successes, s) || !parse_count(raw.failures, f)) {
      ++summary.malformed;
      ++counters_.malformed_values;
      counters_.last_malformed = "key '" + m.key +
                                 "': a count bucket holds a value that is not a count (read '" +
                                 raw.successes + "', '" + raw.failures + "')";
      continue;
    }
    m.fleet_successes = s;
    m.fleet_failures = f;
  }

  for (auto& mp : members_) mp->window_open_pending = false;  // sent
  const std::size_t n_windows = std::min(windowed.size(), reply->windows.size());
  std::vector<std::uint32_t> judged;  // valid fleet totals read: judged after the changes
  for (std::size_t i = 0; i < n_windows; ++i) {
    Member& m = *members_[windowed[i]];
    m.sent = levels[i];
    m.sent_ms = now;
    const auto fleet = parse_window(reply->windows[i]);
    if (!fleet) {
      ++summary.malformed;
      ++counters_.malformed_values;
      counters_.last_malformed = "key '" + m.key + "': the fleet window " + fleet.error();
      continue;
    }
    m.fleet = Level{fleet->calls, fleet->failures, fleet->slow};
    m.fleet_instances = fleet->instances;
    judged.push_back(windowed[i]);
  }

  summary.changes = reply->changes.size();
  for (const RawRecord& raw : reply->changes) {
    auto rec = decode_record(raw.value);
    if (!rec) {
      ++summary.malformed;
      ++counters_.malformed_values;
      counters_.last_malformed = "key '" + raw.key + "': the value " + rec.error();
      continue;
    }
    const auto it = by_key_.find(raw.key);
    if (it == by_key_.end()) {
      known_[raw.key] = *rec;
      continue;
    }
    Member& m = *members_[it->second];
    m.fresh = false;
    apply(m, *rec, server_now, summary);
  }
  for (const auto& mp : members_) {
    Member& m = *mp;
    if (!m.fresh) continue;
    m.fresh = false;
    const auto k = known_.find(m.key);
    if (k == known_.end()) continue;
    const FleetRecord r = k->second;
    known_.erase(k);
    apply(m, r, server_now, summary);
  }
  // The fleet's windows, judged by each breaker's own rate rules once the decisions read
  // above are applied (a key the fleet already holds open is not tripped again).
  for (const std::uint32_t i : judged) {
    Member& m = *members_[i];
    if (m.shared_open || m.state() != State::closed) continue;
    if (m.fleet.calls == 0 || m.fleet.calls < m.minimum_calls) continue;
    const double calls = static_cast<double>(m.fleet.calls);
    TransitionReason reason;
    if (m.failure_rate > 0 && static_cast<double>(m.fleet.failures) / calls >= m.failure_rate) {
      reason = TransitionReason::failure_rate;
    } else if (m.slow_call_rate > 0 &&
               static_cast<double>(m.fleet.slow) / calls >= m.slow_call_rate) {
      reason = TransitionReason::slow_call_rate;
    } else {
      continue;
    }
    const Nanos period = m.next_open();
    if (!m.adopt_open(period)) continue;  // a manual state, or a transition under way
    ++summary.window_trips;
    ++counters_.window_trips;
    m.decision = Decision::local;  // until the store's record of it comes back
    m.window_open_pending = true;
    m.window_reason = reason;
    m.window_until_ms =
        after + std::chrono::duration_cast<std::chrono::milliseconds>(period).count();
  }
  return summary;
}

// `now`: the store's time of the reply the record came with (or a later one), so that
// the remaining open period is the store's, whatever this instance's clock says.
void Fleet::apply(Member& m, const FleetRecord& r, std::int64_t now, SyncSummary& s) {
  m.record = r;
  const bool mine = r.instance == config_.instance;
  if (r.state == SharedState::open) {
    if (r.until_ms <= now) {  // already over: nothing to hold open
      m.shared_open = false;
      return;
    }
    m.shared_open = true;
    m.decision = Decision::shared;
    m.lease_holder = false;
    if (!mine && m.adopt_open(std::chrono::milliseconds(r.until_ms - now))) {
      ++s.adopted;
      ++counters_.adopted_opens;
    }
    return;
  }
  // Closed. Only an open the fleet shared is closed by the fleet: a breaker that
  // opened alone (its calls fail, the fleet's don't) stays open.
  const bool was_shared = m.shared_open;
  m.shared_open = false;
  m.lease_holder = false;
  if (!was_shared) return;
  m.decision = Decision::shared;
  if (!mine && opened(m.state()) && m.adopt_close()) {
    ++s.adopted;
    ++counters_.adopted_closes;
  }
}

FleetReading Fleet::reading() const {
  std::lock_guard state(state_mu_);
  FleetReading r = counters_;
  if (ever_synced_) {
    r.since_last_success = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - last_success_);
  }
  r.keys.reserve(members_.size());
  for (const auto& mp : members_) {
    const Member& m = *mp;
    r.keys.push_back(FleetKeyReading{
        m.key, m.state(), m.decision, m.shared_open, m.shared_open ? m.record.until_ms : 0,
        m.record.instance, m.record.reason, m.lease_holder, m.fleet_successes, m.fleet_failures,
        m.record.fleet_window, m.fleet_window, m.fleet.calls, m.fleet.failures, m.fleet.slow,
        m.fleet_instances});
  }
  return r;
}

}  // namespace bulwark::redis
