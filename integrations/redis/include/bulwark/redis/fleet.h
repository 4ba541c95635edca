// bulwark/redis/fleet.h — breakers that open and close together across instances.
//
// When the breaker for key K opens on one instance of a service, the others keep
// sending K's dependency traffic until their own breakers notice. A Fleet shares the
// decision: attach each instance's breakers to a Fleet over one FleetStore (Redis in
// production: redis_store.h) and call sync() from the application's own timer, every
// sync interval (100 ms to 1 s). Within one sync of each instance after K opened
// somewhere, K is open everywhere, with reason fleet_opened, until the same end;
// when the probe round that ends it closes K on one instance, K closes everywhere
// (fleet_closed).
//
//   bulwark::redis::RedisFleetStore store({.host = "10.0.0.5", .password = secret});
//   bulwark::redis::Fleet fleet({.instance = hostname()}, store);
//   fleet.attach(inventory_breaker);               // key: the breaker's name
//   every(200ms, [&] { fleet.sync(); });           // the application's timer
//
// The request path never waits for the store: a breaker's listener records its
// transition in a bounded queue (a short mutex held for one push into reserved
// storage, at a transition only, never on an admitted call), and only sync() does I/O.
// The Fleet creates no thread. See docs/fleet.md for the protocol and the fault model.
//
// Quorum. With quorum = 1 (the default) any instance's opening opens K everywhere:
// fastest, but one instance with a local problem (its own network, a bad host) takes
// the whole fleet's traffic to K away. With quorum = q, K opens fleet-wide only once q
// instances opened it within quorum_window; an instance whose own calls fail while
// the others' succeed stays open alone (its decision is "local").
//
// Half-open lease. Only one instance probes per open period: near the end of a shared
// open period each instance asks for the key's lease (SET NX PX lease); the holder
// probes, the others stay open until its verdict arrives (closed, or reopened with a
// new end) or the lease expires. The lease must outlast the holder's wait for its first
// probe: at 10 % of 4 calls/s that is 2.5 s on average and often 10 s, so by default
// (lease_duration = 0) each key's lease is derived from the key's own traffic:
//   clamp(2 x sync_interval + 8 / (calls/s x probe fraction) + probe timeout,
//         2 x sync_interval + probe timeout, the breaker's longest open period)
// where calls/s is this instance's rate of calls to the key (admitted and rejected,
// from the breaker's snapshot totals, averaged over about 10 s), the probe fraction is
// the breaker's half_open.fraction (1 in count mode) and the probe timeout
// AttachOptions::probe_timeout (default 1 s). With Poisson calls the holder sees no
// probe within 8 mean gaps once in e^8 (about 3,000) open periods. A key with no calls
// seen yet gets the longest open period. The store holds a derived lease for the
// longest open period (the most any instance of the key waits); each instance that is
// not the holder waits its own derived lease.
//
// Fleet windows. Attached with AttachOptions{.fleet_window = true}, a windowed breaker's
// rate rules (its own failure_rate, slow_call_rate and minimum_calls) are judged on the
// fleet's counts for the key too: each sync sends the breaker's current window counts
// as this instance's level (only when they changed, so an idle key costs nothing) and
// reads back the sum over every instance whose level is fresh (newer than three sync
// intervals). A CLOSED breaker whose fleet sum trips a rule opens (adopt_open, so its
// event says fleet_opened; the reading says fleet_window and the rate reason), and the
// open is shared without a quorum, the evidence being fleet-wide already. An instance
// whose own calls fail while the fleet's succeed still trips on its own window, alone
// unless the quorum is reached.
//
// What is adopted. An open read from the store lasts what is left of it by the
// store's clock; one that would last longer than the breaker's longest open period
// (open_growth.max, or open_duration without growth) is out of bounds: it is refused,
// counted (refused_opens) and named (last_refused), and this instance's own next
// opening replaces it in the store. Instances sharing a key use the same open period
// configuration. A record under this instance's own id that this Fleet did not write
// (a previous run of an instance restarted under the same id) is adopted like any
// other instance's.
//
// Manual transitions are this instance's own. A breaker's reset() or transition_to()
// acts on this instance only: nothing is published, and the fleet's open that a reset
// closed is not adopted again (a later decision of the fleet is). To close a key for
// the whole fleet, call reset(key) on the Fleet: it resets the local breaker and
// publishes a close at the next sync, which every instance holding the fleet's open
// adopts.
//
// Thread-safety: sync(), attach(), detach() and reset() may be called from any thread;
// they serialise on one mutex (attach, detach and reset wait for a sync in progress,
// which returns by its deadline). Two sync() calls at once: the second returns an error
// at once. reading() may be called from any thread at any time, and never waits for
// the store. None of them may be called from a transition listener of an attached
// breaker's policy (they may wait for that thread). The listener runs on whichever
// thread made the transition.
//
// Lifetime. The store must outlive the Fleet. An attached breaker must outlive the
// Fleet or be detached first (detach(); a registry entry attached with attach_handle()
// is pinned by the Fleet, and its registry must outlive the Fleet). Destroying the
// Fleet waits for a sync() running on another thread to return (bounded by the sync's
// deadline; no call may start once destruction began), then removes its listeners,
// waiting for any that runs on another thread: from then on the breakers work alone,
// as if never attached, keeping what they adopted, and never touch the Fleet again.

#ifndef BULWARK_REDIS_FLEET_H_
#define BULWARK_REDIS_FLEET_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/redis/fleet_store.h"

namespace bulwark::redis {

struct FleetConfig {
  // This instance's id in the store: 1-64 characters from [A-Za-z0-9._:-], unique in
  // the fleet (a hostname, a pod name).
  std::string instance;
  // Instances that must open a key within quorum_window before it opens fleet-wide.
  std::uint32_t quorum = 1;
  std::chrono::milliseconds quorum_window = std::chrono::seconds(10);
  // How often the application calls sync(): instances ask for the half-open lease
  // this long (twice over) before a shared open period ends.
  std::chrono::milliseconds sync_interval = std::chrono::milliseconds(200);
  // How long the half-open lease holds; the others stay open at most this long
  // waiting for the holder's verdict. Zero (the default): derived per key from the
  // key's call rate and probe fraction ("Half-open lease" above; FleetKeyReading::
  // lease_ms says what it is now); costs one snapshot() of each attached breaker per
  // sync, to measure the rate. A positive value: every key's lease, as given; longer
  // than the holder's wait for a probe, plus the probe, plus a sync.
  std::chrono::milliseconds lease_duration = std::chrono::milliseconds::zero();
  // Local transitions queued between two syncs; beyond it they are dropped, counted,
  // and the next sync re-reads every attached breaker's state instead.
  std::size_t queue_capacity = 4096;
  // Decisions read per sync at most (oldest first): a new instance joining a fleet with
  // many keys catches up over several syncs instead of one reply too big for the
  // command timeout. 1..100000.
  std::uint32_t max_changes_per_sync = 1000;
  // Fleet-wide counts: when count_bucket is positive, each sync adds the calls each
  // attached breaker completed since the last sync (successes and failures, from its
  // snapshot) to the key's current bucket in the store, and reads back the fleet's
  // totals over the last count_buckets buckets (FleetKeyReading::fleet_*). Keys with
  // no new calls send nothing. Zero (the default): no counting.
  std::chrono::milliseconds count_bucket = std::chrono::milliseconds::zero();
  std::uint32_t count_buckets = 6;
  // Called after a local decision to publish (an automatic opening, the close of an
  // open, a Fleet::reset()) was queued for the next sync, on the thread that made it,
  // outside the Fleet's locks, with the key and the new state; not for a manual
  // transition of the breaker (this instance's own: nothing to publish). An application whose timer
  // ticks every sync_interval can wake it here so the fleet hears of an opening at once rather than
  // up to one interval later. Must be cheap, must not throw, and must not call sync() itself (post
  // to the timer's thread). Empty: nothing.
  std::function<void(const std::string& key, State to)> on_queued{};
  // This instance's wall clock (Unix ms). Only differences of it travel: an open's end
  // goes to the store as until - now of one request, and the store keeps every time in
  // its own clock, so instances' clocks need not agree. Default: system_clock.
  std::function<std::int64_t()> wall_ms{};
};

// Who made a key's current decision, as this instance sees it.
enum class Decision : std::uint8_t {
  none,    // nothing happened to the key yet
  local,   // this instance's breaker decided alone (not shared, or not yet)
  shared,  // the fleet's decision: adopted from another instance, or this one's vote
           // that reached the quorum
};

constexpr std::string_view to_string(Decision d) noexcept {
  switch (d) {
    case Decision::none:
      return "none";
    case Decision::local:
      return "local";
    case Decision::shared:
      return "shared";
  }
  return "unknown";
}

// How attach() shares a breaker.
struct AttachOptions {
  // Judge the key's rate rules (the breaker's own failure_rate, slow_call_rate and
  // minimum_calls) on the fleet's window as well as on the local one. Needs a breaker
  // with a sliding window (CountWindowBreaker, TimeWindowBreaker); costs one snapshot()
  // of the breaker per sync, and a window op in the sync's exchange when its counts
  // changed.
  bool fleet_window = false;
  // How long a probe call may take (its timeout), for the derived lease
  // (FleetConfig::lease_duration = 0). Zero: 1 s.
  std::chrono::milliseconds probe_timeout = std::chrono::milliseconds::zero();
};

struct FleetKeyReading {
  std::string key;
  State local_state;
  Decision decision;
  bool shared_open;         // the fleet holds the key open
  std::int64_t until_ms;    // shared_open: when the shared open period ends (store's clock)
  std::string decided_by;   // the instance that made the fleet's last decision ("" if none)
  TransitionReason reason;  // its reason
  bool lease_holder;        // this instance holds the half-open lease
  // Counting on: the fleet's successes and failures for the key over the count
  // window, as of the last sync that sent this key's calls. Otherwise 0.
  std::uint64_t fleet_successes;
  std::uint64_t fleet_failures;
  // The fleet's last decision for the key was an open by the fleet's window (reason
  // failure_rate or slow_call_rate over every instance's counts).
  bool fleet_window_decision = false;
  // Attached with fleet_window: the fleet's window for the key as of the last sync that
  // sent this instance's level (calls, of which failures and slow, over `instances`
  // fresh levels, this one's included). Otherwise 0.
  bool fleet_window = false;
  std::uint64_t window_calls = 0;
  std::uint64_t window_failures = 0;
  std::uint64_t window_slow = 0;
  std::uint32_t window_instances = 0;
  // The half-open lease this instance asks for the key now (FleetConfig::lease_duration,
  // or the derived one), and the key's call rate on this instance it was derived from
  // (calls/s, admitted and rejected, averaged over about 10 s; 0 until measured).
  std::int64_t lease_ms = 0;
  double calls_per_second = 0;
};

struct FleetReading {
  std::string instance;
  std::uint64_t syncs = 0;                // sync() calls
  std::uint64_t sync_errors = 0;          // syncs whose exchange with the store failed
  std::uint64_t malformed_values = 0;     // values read from the store that were rejected
  std::uint64_t dropped_transitions = 0;  // queue overflows (each forces a full re-read)
  std::uint64_t adopted_opens = 0;
  std::uint64_t adopted_closes = 0;
  std::uint64_t window_trips = 0;  // this instance's breakers opened by a fleet window
  // Opens read from the store that would last longer than the breaker's longest open
  // period: not adopted (fleet.h, "What is adopted").
  std::uint64_t refused_opens = 0;
  // Corrupt values the store found in its own keys and replaced or removed
  // (SyncReply::repairs), as this instance's exchanges reported them.
  std::uint64_t store_repairs = 0;
  // Records of keys this instance has not attached, kept for a later attach() (open
  // ones, until their end; at most kMaxUnattachedRecords, the soonest-ending dropped).
  std::uint64_t unattached_records = 0;
  static constexpr std::size_t kMaxUnattachedRecords = 10'000;
  std::string last_error;      // the last sync error, "" if none yet
  std::string last_malformed;  // the last rejected value, naming its key
  std::string last_refused;    // the last refused open, naming its key
  std::string last_repair;     // the last repair the store reported, naming its key
  // The store's clock minus this instance's wall clock as of the last successful sync
  // (good to one round trip): how far apart the two are. 0 before the first.
  std::int64_t store_clock_offset_ms = 0;
  bool connected = false;                            // the last exchange succeeded
  std::chrono::milliseconds since_last_success{-1};  // -1: never synced successfully
  // Round-trip time of successful exchanges: counts per bucket, bucket i holding
  // times <= kRttBucketsMs[i] (the last: everything slower).
  static constexpr double kRttBucketsMs[] = {0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250};
  std::vector<std::uint64_t> rtt_counts;  // size: std::size(kRttBucketsMs) + 1
  double rtt_sum_ms = 0;
  std::vector<FleetKeyReading> keys;
};

// What sync() did.
struct SyncSummary {
  // Ops sent that publish something: votes, closes, re-publications, lease requests,
  // counts, window levels.
  std::size_t published = 0;
  // Held opens checked in the store (each about every 5 s, at most 64 a sync;
  // re-published if the store lost them). Sent too, not counted in `published`.
  std::size_t checked = 0;
  std::size_t changes = 0;       // decisions read (valid or not)
  std::size_t adopted = 0;       // breakers moved by the fleet
  std::size_t malformed = 0;     // values rejected in this sync
  std::size_t window_trips = 0;  // breakers opened by a fleet window (and the open shared)
  std::size_t refused = 0;       // opens refused as out of bounds in this sync
  std::size_t repairs = 0;       // corrupt values the store replaced in this sync
};

class Fleet {
 public:
  // Validates `config` (throws InvalidConfig naming the field). `store` must outlive
  // the Fleet.
  Fleet(FleetConfig config, FleetStore& store);
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;
  // Waits for a sync() running on another thread, then stops listening to the breakers
  // (see "Lifetime" above).
  ~Fleet();

  // Shares `breaker`'s decisions under `key` (default: its name). Throws InvalidConfig
  // if the key is empty, longer than 512 bytes or already attached, or (field
  // fleet_window) if options.fleet_window is set on a breaker without a sliding window.
  // Allocates; not for the request path. The breaker adopts the fleet's state for the
  // key at the next sync.
  template <class Breaker>
  void attach(Breaker& breaker, AttachOptions options = {}) {
    attach(std::string(breaker.name()), breaker, options);
  }
  template <class Breaker>
  void attach(std::string key, Breaker& breaker, AttachOptions options = {}) {
    attach_impl(std::move(key), breaker, nullptr, options);
  }

  // Shares the breaker of a registry entry (registry.h) under `key`, holding
  // `handle` so that the entry is not evicted while the Fleet lives. The registry
  // must outlive the Fleet.
  template <class Handle>
  requires requires(const Handle& h) { h.breaker(); }
  void attach_handle(std::string key, Handle handle, AttachOptions options = {}) {
    auto held = std::make_shared<Handle>(std::move(handle));
    attach_impl(std::move(key), held->breaker(), held, options);
  }

  // Stops sharing the breaker attached under `key`: after it returns the Fleet never
  // touches that breaker again (it may be destroyed), and the registry handle of an
  // attach_handle() is released. Returns false if no breaker is attached under `key`.
  // Waits for a sync in progress and for the breakers' listeners running on other
  // threads; not for the request path.
  bool detach(const std::string& key);

  // Closes `key` for the whole fleet: resets the breaker attached under it (as its own
  // reset(), locally) and publishes a close at the next sync (on_queued is told), which
  // every instance holding the fleet's open for the key adopts. Returns false if no
  // breaker is attached under `key`. Contrast breaker.reset(), which acts on this
  // instance alone.
  bool reset(const std::string& key);

  // Exchanges with the store once: publishes the transitions queued since the last
  // sync (and re-publishes what the store lost: after a restart or a flush, or an open
  // record it evicted), asks for half-open leases that are due, and applies every
  // decision the fleet made since the last successful sync to the attached breakers.
  // Returns by one deadline, its start plus the store's timeout() (both exchanges of a
  // sync that trips a fleet window included); on error the breakers simply carry on
  // locally and the next sync catches up.
  Expected<SyncSummary, StoreError> sync();

  // Counters and per-key state, for export. Any thread; copies.
  FleetReading reading() const;

  const FleetConfig& config() const noexcept { return config_; }

 private:
  // A breaker's window as a level: calls (slow calls in flight included), failures, slow.
  struct Level {
    std::uint64_t calls = 0, failures = 0, slow = 0;
    bool operator==(const Level&) const = default;
  };
  struct Member {
    std::string key;
    const void* breaker = nullptr;
    std::function<bool(Nanos)> adopt_open;
    std::function<bool()> adopt_close;
    std::function<void()> reset;
    std::function<State()> state;
    std::function<Nanos()> remaining;
    std::function<std::pair<std::uint64_t, std::uint64_t>()> totals;
    std::function<std::uint64_t()> calls;  // derived lease: admitted + rejected, all states
    std::function<Level()> level;          // fleet_window: the window now (zero unless CLOSED)
    std::function<Nanos()> next_open;      // fleet_window: how long an opening now would last
    std::shared_ptr<void> keep;            // a registry handle pinning the breaker, if any
    // The breaker's longest open period (ms): an open read from the store that would
    // last longer is refused.
    std::int64_t max_open_ms = 0;
    // The derived lease: the probe fraction and timeout, and the call rate as two
    // exponentially decayed sums (calls, ms) since attach.
    double probe_fraction = 1.0;
    std::int64_t probe_timeout_ms = 1000;
    std::uint64_t rate_calls_seen = 0;
    std::int64_t rate_seen_ms = -1;  // this instance's wall clock; -1: not yet
    double rate_calls = 0, rate_ms = 0;
    std::int64_t lease_ms = 0;  // the lease asked for (and waited for) now
    // fleet_window: the breaker's rate rules, and the last level the store acknowledged.
    bool fleet_window = false;
    std::uint32_t minimum_calls = 0;
    double failure_rate = 0, slow_call_rate = 0;  // 0: the rule is off
    Level sent{};
    std::int64_t sent_ms = 0;  // this instance's wall clock
    Level fleet{};
    std::uint32_t fleet_instances = 0;
    bool window_open_pending = false;  // tripped by the fleet's window; the open to publish
    TransitionReason window_reason = TransitionReason::failure_rate;
    std::int64_t window_until_ms = 0;     // this instance's wall clock, sent as until - now
    std::uint64_t counted_successes = 0;  // totals already sent
    std::uint64_t counted_failures = 0;
    std::uint64_t fleet_successes = 0;
    std::uint64_t fleet_failures = 0;
    Decision decision = Decision::none;
    bool shared_open = false;
    bool fresh = true;  // attached since the last sync: apply the known record
    bool lease_holder = false;
    bool close_unconfirmed = false;  // a close sent by an exchange that failed: send again
    bool vote_unconfirmed = false;   // the same for this instance's own opening
    TransitionReason vote_reason = TransitionReason::consecutive_failures;
    std::int64_t checked_ms = 0;     // when its open was last checked in the store (wall)
    std::uint64_t lease_asked = 0;   // the sequence of the shared open we asked a lease for
    std::uint64_t own_sequence = 0;  // the last record this Fleet wrote for the key
    FleetRecord record;              // the last valid decision read (until_ms: store's clock)
    // The fleet's open that a manual transition of the breaker closed: not adopted again.
    std::optional<FleetRecord> reset_past;
  };
  struct Queued {
    std::uint32_t member;
    State to;
    TransitionReason reason;
    std::int64_t until_ms;     // this instance's wall clock, sent as until - now
    bool fleet_reset = false;  // Fleet::reset(): publish a close
  };

  template <class Breaker>
  void attach_impl(std::string key, Breaker& breaker, std::shared_ptr<void> keep,
                   AttachOptions options) {
    Member m;
    m.key = std::move(key);
    if (options.fleet_window) {
      if constexpr (requires { breaker.config().minimum_calls; }) {
        const auto& c = breaker.config();
        m.fleet_window = true;
        m.minimum_calls = c.minimum_calls;
        m.failure_rate = c.failure_rate.value_or(0.0);
        m.slow_call_rate = c.slow_call_rate.value_or(0.0);
        m.level = [&breaker] {
          const BreakerSnapshot s = breaker.snapshot();
          if (s.state != State::closed || !s.window) return Level{};
          const WindowCounts& w = *s.window;
          return Level{w.calls + w.in_flight_slow, w.failures, w.slow() + w.in_flight_slow};
        };
        m.next_open = [&breaker] { return breaker.snapshot().open_duration; };
      } else {
        reject_fleet_window(m.key);
      }
    }
    {
      const auto& c = breaker.config();
      const Nanos longest = std::max(c.open_duration, c.open_growth.max);
      m.max_open_ms = std::chrono::duration_cast<std::chrono::milliseconds>(longest).count();
      m.probe_fraction = c.half_open.fraction.value_or(1.0);
    }
    if (options.probe_timeout > std::chrono::milliseconds::zero())
      m.probe_timeout_ms = options.probe_timeout.count();
    m.breaker = &breaker;
    m.adopt_open = [&breaker](Nanos remaining) { return breaker.adopt_open(remaining); };
    m.adopt_close = [&breaker] { return breaker.adopt_close(); };
    m.reset = [&breaker] { breaker.reset(); };
    m.state = [&breaker] { return breaker.state(); };
    m.totals = [&breaker] {
      const BreakerSnapshot s = breaker.snapshot();
      return std::pair<std::uint64_t, std::uint64_t>(s.successes, s.failures);
    };
    m.calls = [&breaker] {
      const BreakerSnapshot s = breaker.snapshot();
      return s.permitted + s.rejected;
    };
    m.remaining = [&breaker] {
      const BreakerSnapshot s = breaker.snapshot();
      return s.state == State::open ? s.open_duration - s.time_in_state : Nanos::zero();
    };
    const void* policy_id = &breaker.config();
    auto listen = [&breaker, this]() {
      typename Breaker::Policy policy = breaker.policy();
      const ListenerId id =
          policy.on_transition([this](const TransitionEvent& e) { on_transition(e); });
      return std::function<void()>([policy, id]() mutable { policy.remove_listener(id); });
    };
    m.keep = std::move(keep);
    add_member(std::move(m), policy_id, listen);
  }
  [[noreturn]] void reject_fleet_window(const std::string& key) const;
  Expected<SyncSummary, StoreError> exchange_once(bool counts_as_sync,
                                                  std::chrono::steady_clock::time_point deadline);
  void add_member(Member m, const void* policy_id,
                  const std::function<std::function<void()>()>& listen);
  void on_transition(const TransitionEvent& e) noexcept;
  void apply(Member& m, const FleetRecord& r, std::int64_t now, SyncSummary& s);
  void measure_rate(Member& m, std::int64_t now);
  std::int64_t derived_lease_ms(const Member& m) const;
  std::int64_t longest_lease_ms(const Member& m) const;
  void remember(const std::string& key, const FleetRecord& r, std::int64_t now);
  std::int64_t wall_now() const { return config_.wall_ms(); }

  FleetConfig config_;
  FleetStore& store_;

  // Serialises sync(), attach(), detach(), reset() and the destructor.
  std::mutex sync_mu_;
  std::atomic<bool> syncing_{false};

  // The listener's queue: taken at transitions and by sync() to swap, nothing else.
  mutable std::mutex queue_mu_;
  struct Attached {
    std::uint32_t member;
    // The member's key, for on_queued: shared, so that a detach() while the listener
    // calls on_queued on another thread frees nothing it uses (a copy is one atomic add).
    std::shared_ptr<const std::string> key;
  };
  std::unordered_map<const void*, Attached> by_breaker_;  // under queue_mu_
  std::vector<Queued> queue_;                             // under queue_mu_
  bool overflowed_ = false;                               // under queue_mu_
  std::vector<Queued> draining_;                          // sync() only

  // The Fleet's view: written by sync() and attach(), read by reading().
  mutable std::mutex state_mu_;
  std::vector<std::unique_ptr<Member>> members_;  // a detached member's slot is empty
  std::map<std::string, std::uint32_t> by_key_;
  // Valid open decisions for keys not attached, until their end (store's clock), and
  // the same by end, to drop the ended ones and the soonest-ending beyond the cap.
  std::map<std::string, FleetRecord> known_;
  std::set<std::pair<std::int64_t, std::string>> known_by_end_;
  std::vector<std::function<void()>> unlisten_;
  std::map<const void*, bool> listened_policies_;
  std::uint64_t cursor_ = 0;
  std::string incarnation_;
  bool republish_ = false;
  bool rescan_ = false;
  std::size_t check_next_ = 0;  // the round-robin of held opens checked in the store
  FleetReading counters_;
  std::chrono::steady_clock::time_point last_success_{};
  // The store's clock minus this instance's wall clock, as of the last reply (an
  // estimate good to one round trip): for comparing a record's until_ms with now.
  std::int64_t store_offset_ms_ = 0;
  bool ever_synced_ = false;
};

}  // namespace bulwark::redis

#endif  // BULWARK_REDIS_FLEET_H_
