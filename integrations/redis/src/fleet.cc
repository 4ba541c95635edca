#include "bulwark/redis/fleet.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <limits>

#include "bulwark/config_error.h"

namespace bulwark::redis {
namespace {

// Held opens checked in the store per sync at most, and how often each (ms).
constexpr std::size_t kChecksPerSync = 64;
constexpr std::int64_t kCheckEveryMs = 5'000;
// The derived lease: the call rate's averaging time (ms), and the mean probe gaps the
// holder is given to see its first probe (e^-8: about one open period in 3,000 misses).
constexpr double kRateTauMs = 10'000;
constexpr double kProbeGaps = 8;

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
  if (config_.lease_duration < std::chrono::milliseconds::zero())
    bad(config_, "lease_duration", "must not be negative (0: derived per key)");
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
  // A sync() running on another thread returns by its deadline; nothing else may start.
  std::lock_guard sync(sync_mu_);
  // Each removal waits for the listener to leave any thread it runs on: after this the
  // breakers never call into this Fleet again.
  for (auto& remove : unlisten_) remove();
}

void Fleet::add_member(Member m, const void* policy_id,
                       const std::function<std::function<void()>()>& listen) {
  if (m.key.empty() || m.key.size() > 512)
    bad(config_, "key", "must be 1-512 bytes, got " + std::to_string(m.key.size()));
  std::lock_guard sync(sync_mu_);
  std::lock_guard state(state_mu_);
  if (by_key_.count(m.key) != 0) bad(config_, "key", "'" + m.key + "' is already attached");
  const auto index = static_cast<std::uint32_t>(members_.size());
  const void* breaker = m.breaker;
  {
    std::lock_guard queue(queue_mu_);
    if (by_breaker_.count(breaker) != 0)
      bad(config_, "key", "'" + m.key + "': that breaker is already attached");
  }
  auto key = std::make_shared<const std::string>(m.key);
  by_key_.emplace(m.key, index);
  members_.push_back(std::make_unique<Member>(std::move(m)));
  if (!listened_policies_[policy_id]) {
    unlisten_.push_back(listen());
    listened_policies_[policy_id] = true;
  }
  std::lock_guard queue(queue_mu_);
  by_breaker_.emplace(breaker, Attached{index, std::move(key)});
}

bool Fleet::detach(const std::string& key) {
  std::lock_guard sync(sync_mu_);
  std::unique_ptr<Member> gone;
  {
    std::lock_guard state(state_mu_);
    const auto it = by_key_.find(key);
    if (it == by_key_.end()) return false;
    const std::uint32_t index = it->second;
    by_key_.erase(it);
    gone = std::move(members_[index]);
    std::lock_guard queue(queue_mu_);
    by_breaker_.erase(gone->breaker);
    // Queued transitions of the member are skipped by the next sync (its slot is empty).
  }
  // A listener that found the breaker before the erase may still be running on another
  // thread; it touches only the queue and its shared key, never the member, so the
  // member (its closures over the breaker, its registry handle) can go now.
  return true;
}

bool Fleet::reset(const std::string& key) {
  std::lock_guard sync(sync_mu_);
  std::uint32_t index = 0;
  std::function<void()> reset_breaker;
  std::shared_ptr<const std::string> shared_key;
  {
    std::lock_guard state(state_mu_);
    const auto it = by_key_.find(key);
    if (it == by_key_.end()) return false;
    index = it->second;
    reset_breaker = members_[index]->reset;
    std::lock_guard queue(queue_mu_);
    shared_key = by_breaker_.at(members_[index]->breaker).key;
  }
  reset_breaker();  // its listener queues a manual close: this instance's own
  {
    // Past the queue's capacity if need be (this is not the request path: it may
    // allocate): an overflow's rescan would not publish this close.
    std::lock_guard queue(queue_mu_);
    queue_.push_back(Queued{index, State::closed, TransitionReason::manual, 0, true});
  }
  if (config_.on_queued) config_.on_queued(*shared_key, State::closed);
  return true;
}

// On the thread that made the transition. Bounded: a lookup and a push into reserved
// storage under a mutex that sync() holds only to swap two vectors.
void Fleet::on_transition(const TransitionEvent& e) noexcept {
  if (e.reason == TransitionReason::fleet_opened || e.reason == TransitionReason::fleet_closed)
    return;  // the fleet's own decision coming back
  const bool manual = e.reason == TransitionReason::manual;
  const bool to_open = e.to == State::open;
  const bool to_closed = e.to == State::closed && opened(e.from);
  if (!to_open && !to_closed) return;
  // This instance's wall clock: the store keeps only until - SyncRequest::now_ms of it.
  std::int64_t until = 0;
  if (to_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(e.open_duration);
    if (__builtin_add_overflow(config_.wall_ms(), left.count(), &until))
      until = std::numeric_limits<std::int64_t>::max();
  }
  std::shared_ptr<const std::string> key;
  {
    std::lock_guard lock(queue_mu_);
    const auto it = by_breaker_.find(e.breaker);
    if (it == by_breaker_.end()) return;  // another breaker of the same policy
    if (queue_.size() >= config_.queue_capacity) {
      overflowed_ = true;
    } else {
      queue_.push_back(Queued{it->second.member, e.to, e.reason, until});
    }
    // A manual transition is this instance's own: nothing to publish, nobody to wake.
    if (!manual && config_.on_queued) key = it->second.key;
  }
  if (key) config_.on_queued(*key, e.to);
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
  std::lock_guard sync(sync_mu_);
  // Cleared before the lock is released: once it is, a destructor waiting for it may
  // free this Fleet, and nothing here may touch it any more.
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag.store(false, std::memory_order_release); }
  } done{syncing_};
  // One deadline for the whole sync: both exchanges of a sync that trips a fleet window.
  const std::chrono::milliseconds budget = store_.timeout();
  const auto deadline = budget > std::chrono::milliseconds::zero()
                            ? std::chrono::steady_clock::now() + budget
                            : std::chrono::steady_clock::time_point::max();
  auto first = exchange_once(true, deadline);
  if (!first || first->window_trips == 0) return first;
  // A fleet window tripped here: share the open now rather than a sync later. Only the
  // window_open ops (and anything queued meanwhile) go out.
  auto second = exchange_once(false, deadline);
  if (!second) return first;  // the open is sent again by the next sync
  first->published += second->published;
  first->changes += second->changes;
  first->adopted += second->adopted;
  first->malformed += second->malformed;
  first->window_trips += second->window_trips;
  first->refused += second->refused;
  first->repairs += second->repairs;
  first->checked += second->checked;
  return first;
}

Expected<SyncSummary, StoreError> Fleet::exchange_once(
    bool counts_as_sync, std::chrono::steady_clock::time_point deadline) {
  SyncSummary summary;
  SyncRequest req;
  req.deadline = deadline;
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
  // Which member each op is about, for the reply's `written`.
  std::vector<std::uint32_t> op_member;
  auto push = [&](std::uint32_t member, FleetOp op) {
    req.ops.push_back(std::move(op));
    op_member.push_back(member);
  };
  // What happened locally.
  for (const Queued& q : draining_) {
    if (!members_[q.member]) continue;  // detached since
    Member& m = *members_[q.member];
    if (q.fleet_reset) {
      // Fleet::reset(): the key closes for the whole fleet.
      m.reset_past.reset();
      m.decision = Decision::local;
      m.lease_holder = false;
      m.close_unconfirmed = true;
      push(q.member, {FleetOp::Kind::close, m.key, TransitionReason::manual, 0, 0});
    } else if (q.reason == TransitionReason::manual) {
      // The breaker's own reset() or transition_to(): this instance alone. A fleet's open
      // it closed is not adopted again.
      m.decision = Decision::local;
      m.lease_holder = false;
      if (q.to == State::closed && m.shared_open) m.reset_past = m.record;
    } else if (q.to == State::open) {
      m.decision = Decision::local;
      m.reset_past.reset();
      FleetOp op{FleetOp::Kind::vote_open, m.key, q.reason, q.until_ms, 0};
      op.max_open_ms = m.max_open_ms;
      m.vote_unconfirmed = true;
      m.vote_reason = q.reason;
      push(q.member, std::move(op));
    } else {
      m.decision = Decision::local;
      m.lease_holder = false;
      m.close_unconfirmed = true;
      push(q.member, {FleetOp::Kind::close, m.key, q.reason, 0, 0});
    }
  }
  // After lost transitions or a failed sync: re-read every breaker. After the store
  // lost its contents: publish again what is still open here.
  if (rescan_ || republish_) {
    for (std::uint32_t i = 0; i < members_.size(); ++i) {
      if (!members_[i]) continue;
      Member& m = *members_[i];
      const State s = m.state();
      if (s == State::open) {
        if (m.window_open_pending) continue;  // its window_open goes out below
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(m.remaining()).count();
        if (left <= 0) continue;
        // This instance's own opening, whose vote may be lost, is voted again. An open
        // adopted from the fleet only goes back if the store lost it, without a quorum,
        // with its mark (assert_open: never over a decision made since, a close this
        // instance has not read yet).
        const bool own = m.vote_unconfirmed || !m.shared_open;
        FleetOp op{own ? FleetOp::Kind::vote_open : FleetOp::Kind::assert_open, m.key,
                   own ? m.vote_reason : m.record.reason, now + left, 0};
        op.max_open_ms = m.max_open_ms;
        op.known_sequence = own ? 0 : m.record.sequence;
        op.fleet_window = !own && m.record.fleet_window;
        if (own) m.vote_unconfirmed = true;
        push(i, std::move(op));
      } else if (s == State::closed && m.close_unconfirmed) {
        push(i, {FleetOp::Kind::close, m.key, TransitionReason::probes_succeeded, 0, 0});
      }
    }
  }
  // Held opens the store may have lost (an eviction): each is checked about every five
  // seconds (every sync if syncs are further apart), at most 64 a sync, round robin; the
  // store records one again only if its record is gone (assert_open).
  std::size_t checks = 0;
  if (!republish_ && !members_.empty()) {  // after a new incarnation they all go above
    const std::int64_t every = std::max<std::int64_t>(kCheckEveryMs, config_.sync_interval.count());
    const std::size_t start = check_next_ % members_.size();
    for (std::size_t n = 0; n < members_.size() && checks < kChecksPerSync; ++n) {
      const std::size_t i = (start + n) % members_.size();
      if (!members_[i]) continue;
      Member& m = *members_[i];
      if (!m.shared_open || m.reset_past || !opened(m.state())) continue;
      if (now - m.checked_ms < every && now >= m.checked_ms) continue;
      const std::int64_t left = m.record.until_ms - (now + store_offset_ms_);
      if (left <= 0) continue;
      FleetOp op{FleetOp::Kind::assert_open, m.key, m.record.reason, now + left, 0};
      op.known_sequence = m.record.sequence;
      op.fleet_window = m.record.fleet_window;
      push(static_cast<std::uint32_t>(i), std::move(op));
      m.checked_ms = now;
      ++checks;
      check_next_ = i + 1;
    }
  }
  // The derived lease: each key's call rate, measured at every sync.
  if (counts_as_sync && config_.lease_duration == std::chrono::milliseconds::zero()) {
    for (const auto& mp : members_) {
      if (mp) measure_rate(*mp, now);
    }
  }
  // Half-open leases due: near the end of a shared open period.
  std::vector<std::uint32_t> leased;
  std::vector<std::size_t> leased_op;  // the op of each, in req.ops
  const std::int64_t lead = 2 * config_.sync_interval.count();
  // None while the store is read again from the start (cursor 0, after it restarted):
  // the records held here may be the old store's, their lease asked for already.
  for (std::uint32_t i = 0; i < members_.size() && cursor_ != 0; ++i) {
    if (!members_[i]) continue;
    Member& m = *members_[i];
    if (!m.shared_open || m.reset_past || m.lease_asked == m.record.sequence) continue;
    // The record's end is the store's: compared with the store's time now, as estimated
    // from the last reply.
    if (now + store_offset_ms_ < m.record.until_ms - lead || !opened(m.state())) continue;
    // Derived: the store holds the lease for the longest any instance of the key may
    // wait (the breaker's longest open period, the same everywhere: the store removes a
    // lease held longer than twice what a request asks), and this instance waits its own.
    const bool fixed = config_.lease_duration > std::chrono::milliseconds::zero();
    m.lease_ms = fixed ? config_.lease_duration.count() : derived_lease_ms(m);
    const std::int64_t held = fixed ? m.lease_ms : longest_lease_ms(m);
    push(i, {FleetOp::Kind::lease, m.key, m.record.reason, 0, held});
    leased.push_back(i);
    leased_op.push_back(req.ops.size() - 1);
  }
  // Fleet-wide counts: what each breaker completed since the last successful count.
  struct Counted {
    std::uint32_t member;
    std::uint64_t successes, failures;
    std::size_t op;
  };
  std::vector<Counted> counted;
  if (config_.count_bucket > std::chrono::milliseconds::zero()) {
    req.count_bucket_ms = config_.count_bucket.count();
    req.count_buckets = config_.count_buckets;
    for (std::uint32_t i = 0; i < members_.size(); ++i) {
      if (!members_[i]) continue;
      Member& m = *members_[i];
      const auto [succ, fail] = m.totals();
      const std::uint64_t ds = succ - m.counted_successes, df = fail - m.counted_failures;
      if (ds == 0 && df == 0) continue;
      FleetOp op{FleetOp::Kind::count, m.key};
      op.successes = ds;
      op.failures = df;
      push(i, std::move(op));
      counted.push_back({i, succ, fail, req.ops.size() - 1});
    }
  }
  // Fleet windows: the opens they caused, and every level that changed (or that the
  // store would soon forget: a level unchanged for two sync intervals is sent again).
  std::vector<std::uint32_t> windowed;
  std::vector<std::size_t> windowed_op;
  std::vector<Level> levels;
  for (std::uint32_t i = 0; i < members_.size(); ++i) {
    if (!members_[i]) continue;
    Member& m = *members_[i];
    if (!m.fleet_window) continue;
    if (m.window_open_pending) {
      FleetOp op{FleetOp::Kind::window_open, m.key, m.window_reason, m.window_until_ms};
      op.max_open_ms = m.max_open_ms;
      push(i, std::move(op));
    }
    const Level level = m.level();
    const bool refresh = level.calls != 0 && now - m.sent_ms >= 2 * config_.sync_interval.count();
    if (level == m.sent && !refresh) continue;
    FleetOp op{FleetOp::Kind::window, m.key};
    op.calls = level.calls;
    op.failures = level.failures;
    op.slow = level.slow;
    push(i, std::move(op));
    windowed.push_back(i);
    windowed_op.push_back(req.ops.size() - 1);
    levels.push_back(level);
  }
  if (!windowed.empty()) req.window_ttl_ms = 3 * config_.sync_interval.count();
  summary.published = req.ops.size() - checks;
  summary.checked = checks;
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
  // What the store repaired in its own keys: counted, whatever else the reply holds.
  for (const std::string& what : reply->repairs) {
    ++summary.repairs;
    ++counters_.store_repairs;
    counters_.last_repair = what;
  }
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
  // Ops the store could not deliver (a sharded store, one of whose nodes failed): their
  // members keep what is unconfirmed, and the next sync re-reads every breaker.
  auto lost = [&](std::size_t op) { return op < reply->lost.size() && reply->lost[op] != 0; };
  std::vector<bool> member_lost(members_.size(), false);
  for (std::size_t i = 0; i < op_member.size(); ++i) {
    if (lost(i)) member_lost[op_member[i]] = true;
  }
  if (!reply->partial_error.empty()) {
    ++counters_.sync_errors;
    counters_.last_error = "partial: " + reply->partial_error;
    counters_.connected = false;
    rescan_ = true;
  }
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] && !member_lost[i])
      members_[i]->close_unconfirmed = members_[i]->vote_unconfirmed = false;
  }
  // The records this run wrote: its own, never adopted back.
  const std::size_t n_written = std::min(op_member.size(), reply->written.size());
  for (std::size_t i = 0; i < n_written; ++i) {
    if (reply->written[i] != 0) members_[op_member[i]]->own_sequence = reply->written[i];
  }

  // This instance's wall clock, after the exchange: the reference the window opens
  // decided below are sent in (as `now` above). The reply's times are the store's and
  // are read against reply->server_ms, never against this clock.
  const std::int64_t after = wall_now();
  const std::int64_t server_now = reply->server_ms;
  store_offset_ms_ = server_now - after;
  counters_.store_clock_offset_ms = store_offset_ms_;
  if (!incarnation_.empty() && reply->incarnation != incarnation_) {
    // The store started again empty (or from a snapshot): read it from the start, and
    // publish again.
    republish_ = true;
    cursor_ = 0;
  } else if (reply->sequence < cursor_) {
    // The same store, but behind what this instance has read (restored from an older
    // snapshot, or its counter replaced): the same.
    republish_ = true;
    cursor_ = 0;
  } else {
    cursor_ = reply->sequence;
  }
  // Read from the start: the store numbers its decisions again from where it restarted,
  // so a lease asked for an old decision says nothing of a new one under the same
  // number; and a lease this reply grants was asked for a decision the store no longer
  // holds: neither is kept, nor waited for.
  const bool reread = cursor_ == 0;
  if (reread) {
    for (const auto& mp : members_) {
      if (mp) mp->lease_asked = 0;
    }
  }
  incarnation_ = reply->incarnation;

  const std::size_t n_leases = reread ? 0 : std::min(leased.size(), reply->lease_holders.size());
  for (std::size_t i = 0; i < n_leases; ++i) {
    Member& m = *members_[leased[i]];
    const std::string& holder = reply->lease_holders[i];
    if (holder.empty() || lost(leased_op[i])) continue;  // expired in between: ask again next time
    m.lease_asked = m.record.sequence;
    m.lease_holder = holder == config_.instance;
    if (!m.lease_holder) {
      // Someone else probes: stay open until its verdict or the lease's end.
      if (m.adopt_open(std::chrono::milliseconds(m.lease_ms))) ++summary.adopted;
    }
  }

  const std::size_t n_counts = std::min(counted.size(), reply->counts.size());
  for (std::size_t i = 0; i < n_counts; ++i) {
    if (lost(counted[i].op)) continue;  // not added: sent again next time
    Member& m = *members_[counted[i].member];
    m.counted_successes = counted[i].successes;
    m.counted_failures = counted[i].failures;
    const auto& raw = reply->counts[i];
    std::uint64_t s = 0, f = 0;
    if (!parse_count(raw.successes, s) || !parse_count(raw.failures, f)) {
      ++summary.malformed;
      ++counters_.malformed_values;
      counters_.last_malformed = "key '" + m.key +
                                 "': a count bucket holds a value that is not a count (read " +
                                 quoted(raw.successes) + ", " + quoted(raw.failures) + ")";
      continue;
    }
    m.fleet_successes = s;
    m.fleet_failures = f;
  }

  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] && !member_lost[i]) members_[i]->window_open_pending = false;  // sent
  }
  const std::size_t n_windows = std::min(windowed.size(), reply->windows.size());
  std::vector<std::uint32_t> judged;  // valid fleet totals read: judged after the changes
  for (std::size_t i = 0; i < n_windows; ++i) {
    if (lost(windowed_op[i])) continue;  // sent again next time
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
      counters_.last_malformed = "key " + quoted(raw.key) + ": the value " + rec.error();
      continue;
    }
    const auto it = by_key_.find(raw.key);
    if (it == by_key_.end()) {
      remember(raw.key, *rec, server_now);
      continue;
    }
    Member& m = *members_[it->second];
    m.fresh = false;
    apply(m, *rec, server_now, summary);
  }
  for (const auto& mp : members_) {
    if (!mp) continue;
    Member& m = *mp;
    if (!m.fresh) continue;
    m.fresh = false;
    const auto k = known_.find(m.key);
    if (k == known_.end()) continue;
    const FleetRecord r = k->second;
    known_by_end_.erase({r.until_ms, m.key});
    known_.erase(k);
    apply(m, r, server_now, summary);
  }
  // Records of keys not attached whose open period is over are of no use to a later
  // attach(): dropped.
  while (!known_by_end_.empty() && known_by_end_.begin()->first <= server_now) {
    known_.erase(known_by_end_.begin()->second);
    known_by_end_.erase(known_by_end_.begin());
  }
  counters_.unattached_records = known_.size();
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

// The key's calls on this instance (admitted and rejected, in every state) as two
// exponentially decayed sums: calls, and the ms they came in. Their ratio is the rate
// averaged over about kRateTauMs, unbiased from the first interval on.
void Fleet::measure_rate(Member& m, std::int64_t now) {
  const std::uint64_t calls = m.calls();
  if (m.rate_seen_ms < 0 || now < m.rate_seen_ms) {  // the first sync, or the clock went back
    m.rate_seen_ms = now;
    m.rate_calls_seen = calls;
    return;
  }
  const std::int64_t dt = now - m.rate_seen_ms;
  if (dt == 0) return;
  const double decay = std::exp(-static_cast<double>(dt) / kRateTauMs);
  m.rate_calls = m.rate_calls * decay + static_cast<double>(calls - m.rate_calls_seen);
  m.rate_ms = m.rate_ms * decay + static_cast<double>(dt);
  m.rate_seen_ms = now;
  m.rate_calls_seen = calls;
}

// fleet.h, "Half-open lease": 2 x sync_interval (the lease is asked that long before the
// open period ends) + the probe's timeout + kProbeGaps mean gaps between probes, within
// [2 x sync_interval + probe timeout, the breaker's longest open period].
std::int64_t Fleet::longest_lease_ms(const Member& m) const {
  return std::max(2 * config_.sync_interval.count() + m.probe_timeout_ms, m.max_open_ms);
}

std::int64_t Fleet::derived_lease_ms(const Member& m) const {
  const std::int64_t lo = 2 * config_.sync_interval.count() + m.probe_timeout_ms;
  const std::int64_t hi = longest_lease_ms(m);
  if (m.rate_calls <= 0 || m.rate_ms <= 0) return hi;
  const double probes_per_ms = m.rate_calls / m.rate_ms * m.probe_fraction;
  const double lease = static_cast<double>(lo) + kProbeGaps / probes_per_ms;
  if (!(lease < static_cast<double>(hi))) return hi;
  return static_cast<std::int64_t>(std::ceil(lease));
}

// A valid decision for a key not attached: kept (open ones only, until their end) so
// that a breaker attached later starts with it; at most kMaxUnattachedRecords, the
// soonest-ending dropped first.
void Fleet::remember(const std::string& key, const FleetRecord& r, std::int64_t now) {
  if (const auto it = known_.find(key); it != known_.end()) {
    known_by_end_.erase({it->second.until_ms, key});
    known_.erase(it);
  }
  // A close says nothing to a breaker attached later (only an open the fleet shared with
  // it is closed by the fleet), and an ended open nothing either.
  if (r.state != SharedState::open || r.until_ms <= now) return;
  if (known_.size() >= FleetReading::kMaxUnattachedRecords) {
    if (known_by_end_.begin()->first >= r.until_ms) return;  // ends sooner than all kept
    known_.erase(known_by_end_.begin()->second);
    known_by_end_.erase(known_by_end_.begin());
  }
  known_.emplace(key, r);
  known_by_end_.emplace(r.until_ms, key);
}

// `now`: the store's time of the reply the record came with (or a later one), so that
// the remaining open period is the store's, whatever this instance's clock says.
void Fleet::apply(Member& m, const FleetRecord& r, std::int64_t now, SyncSummary& s) {
  // This run's own record, as the store said it wrote it. A record under this id that
  // this Fleet did not write comes from another process under the same id: a previous
  // run of this instance, restarted (or a misconfigured twin); it is the fleet's.
  const bool mine = r.instance == config_.instance && r.sequence == m.own_sequence;
  if (r.state == SharedState::open) {
    if (r.until_ms <= now) {  // already over: nothing to hold open
      m.record = r;
      m.shared_open = false;
      return;
    }
    // Both are at most 2^63 - 1 and now is positive: no overflow.
    const std::int64_t left = r.until_ms - now;
    if (left > m.max_open_ms) {
      // Out of bounds: a value no breaker here would write. Refused (the breaker keeps
      // its own state) and this instance's own next opening replaces it in the store.
      ++s.refused;
      ++counters_.refused_opens;
      counters_.last_refused = "key '" + m.key + "': an open by '" + r.instance + "' lasting " +
                               std::to_string(left) +
                               " ms more is longer than the breaker's longest open period (" +
                               std::to_string(m.max_open_ms) + " ms): not adopted";
      m.shared_open = false;
      return;
    }
    m.record = r;
    m.shared_open = true;
    m.decision = Decision::shared;
    m.lease_holder = false;
    if (m.reset_past) {
      // The open this instance's breaker was reset past, read again (re-read from the
      // start, or published again after the store lost it: the same end, give or take a
      // round trip): not adopted again. A later decision of the fleet is.
      if (r.until_ms <= m.reset_past->until_ms + config_.sync_interval.count()) return;
      m.reset_past.reset();
    }
    if (!mine && m.adopt_open(std::chrono::milliseconds(left))) {
      ++s.adopted;
      ++counters_.adopted_opens;
    }
    return;
  }
  // Closed. Only an open the fleet shared is closed by the fleet: a breaker that
  // opened alone (its calls fail, the fleet's don't) stays open.
  m.record = r;
  m.reset_past.reset();
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
    if (!mp) continue;
    const Member& m = *mp;
    r.keys.push_back(FleetKeyReading{
        m.key, m.state(), m.decision, m.shared_open, m.shared_open ? m.record.until_ms : 0,
        m.record.instance, m.record.reason, m.lease_holder, m.fleet_successes, m.fleet_failures,
        m.record.fleet_window, m.fleet_window, m.fleet.calls, m.fleet.failures, m.fleet.slow,
        m.fleet_instances});
    FleetKeyReading& k = r.keys.back();
    k.lease_ms = config_.lease_duration > std::chrono::milliseconds::zero()
                     ? config_.lease_duration.count()
                     : derived_lease_ms(m);
    k.calls_per_second = m.rate_ms > 0 ? m.rate_calls / m.rate_ms * 1000.0 : 0.0;
  }
  return r;
}

}  // namespace bulwark::redis
