// bulwark/redis/fleet_store.h — where instances of a service share breaker decisions.
//
// A FleetStore holds, per key (a breaker's name), the fleet's last decision: open
// until a time of the store's clock, or closed, with the reason, the instance that decided and
// the decision's sequence number. An instance talks to it only from Fleet::sync()
// (fleet.h), in one exchange per sync: it sends what changed locally (votes to open,
// closes, re-publications, half-open lease requests) and gets back every decision made
// since its cursor. Two stores ship: MemoryFleetStore (one process, for tests and the
// lab, with injectable latency and outage) and RedisFleetStore (redis_store.h).
//
// Decisions travel as text ("v1|open|<reason>|<until_ms>|<instance>|<seq>") so that
// every backend hands the Fleet raw values and the Fleet validates them in one place:
// decode_record() rejects anything malformed with a message naming the problem.
//
// The store's clock is the fleet's only clock. Every time a store keeps (an open's end,
// votes, count buckets, window levels, expiries) is its own, read when it handles the
// exchange; an op's until_ms arrives in the sender's wall clock and is converted on
// arrival to the store's now + (until_ms - request.now_ms), at least the store's now,
// so that only the remaining time travels. Instances' clocks need not agree.

#ifndef BULWARK_REDIS_FLEET_STORE_H_
#define BULWARK_REDIS_FLEET_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/breaker_events.h"
#include "bulwark/expected.h"

namespace bulwark::redis {

enum class SharedState : std::uint8_t { closed, open };

constexpr std::string_view to_string(SharedState s) noexcept {
  return s == SharedState::open ? "open" : "closed";
}

// The fleet's decision for one key.
struct FleetRecord {
  SharedState state = SharedState::closed;
  TransitionReason reason = TransitionReason::manual;  // why the deciding instance moved
  std::int64_t until_ms = 0;   // open: when the open period ends (store's Unix ms); closed: 0
  std::string instance;        // who decided
  std::uint64_t sequence = 0;  // the store's sequence number of this decision (> 0)
  // Open because the fleet's window reached a rate threshold (reason failure_rate or
  // slow_call_rate), not because of one instance's own calls.
  bool fleet_window = false;
};

// "v1|open|consecutive_failures|1733100000000|web-1|42", and for an open the fleet's
// window decided a seventh field: "v1|open|failure_rate|1733100000000|web-1|43|window".
// decode_record() accepts only what encode_record() writes: a known version, state and
// reason, a non-negative until_ms (0 for closed), a valid instance id, a positive
// sequence, and no seventh field but "window" on an open with a rate reason.
std::string encode_record(const FleetRecord& r);
Expected<FleetRecord, std::string> decode_record(std::string_view text);

// Instance ids: 1-64 characters from [A-Za-z0-9._:-].
bool valid_instance_id(std::string_view id) noexcept;
// Parses a reason name as to_string(TransitionReason) prints it.
std::optional<TransitionReason> parse_reason(std::string_view name) noexcept;

// One change an instance sends.
struct FleetOp {
  enum class Kind : std::uint8_t {
    vote_open,    // my breaker opened: count my vote; with `quorum` votes in the window
                  // (or from the half-open lease holder) the key opens fleet-wide
    close,        // my breaker closed after an open the fleet shared: the key closes
    assert_open,  // the store may have lost the key (a restart, an eviction): record it
                  // open again, no quorum, if it has no record (see known_sequence)
    lease,        // ask for the half-open lease (SET NX PX lease_ms); the reply says who holds it
    count,        // add successes / failures to the key's current time bucket; the reply
                  // has the fleet-wide totals over the last count_buckets buckets
    window,       // set this instance's window level for the key (calls, failures, slow,
                  // stamped with the store's now; calls 0 removes it); the reply has the totals
                  // over every instance's entry newer than window_ttl_ms
    window_open,  // the fleet's window tripped: record the key open (reason, until_ms,
                  // marked fleet_window) without a quorum, unless it already is open
                  // until at least as late
  };
  Kind kind;
  std::string key;
  TransitionReason reason = TransitionReason::manual;
  std::int64_t until_ms = 0;  // the sender's wall clock, as SyncRequest::now_ms
  std::int64_t lease_ms = 0;
  std::uint64_t successes = 0;  // count: this instance's calls since its last count
  std::uint64_t failures = 0;   // count, window: failures (slow or not)
  std::uint64_t calls = 0;      // window: calls in the window, slow calls in flight included
  std::uint64_t slow = 0;       // window: slow calls, slow calls in flight included
  // vote_open, window_open: the sender's longest open period (0: no bound). A current
  // open ending later than the store's now plus this is replaced by the sender's.
  std::int64_t max_open_ms = 0;
  // assert_open: the sequence of the record the sender holds (0: none). The store
  // records the open again only if the key has no record, or its record is not listed in
  // the changes, and no decision newer than this one was made since (its record lost
  // too): an instance that missed a close never reopens the key with a stale open.
  std::uint64_t known_sequence = 0;
  // assert_open: the record carries the fleet_window mark.
  bool fleet_window = false;
};

struct SyncRequest {
  std::string instance;
  // The sender's wall clock (Unix ms) when it built the request: only the reference its
  // ops' until_ms are converted from (the store keeps until_ms - now_ms of each).
  std::int64_t now_ms = 0;
  std::uint32_t quorum = 1;
  std::int64_t quorum_window_ms = 10'000;
  std::uint64_t cursor = 0;  // the last sequence number this instance has seen
  // At most this many changes per reply (oldest first); the reply's sequence is then
  // the last one returned, and the next exchange reads on from there.
  std::uint32_t max_changes = 1000;
  // Fleet-wide counts (count ops): buckets of count_bucket_ms, the current one the
  // store's now / count_bucket_ms, totals over the last count_buckets. 0: no counting.
  std::int64_t count_bucket_ms = 0;
  std::uint32_t count_buckets = 0;
  // Window levels (window ops): entries stamped at or before the store's now minus
  // window_ttl_ms are
  // stale, left out of the totals and dropped. Positive when a window op is sent.
  std::int64_t window_ttl_ms = 0;
  std::vector<FleetOp> ops;
  // The caller's deadline: the store returns by then (a `timeout` error) or earlier by
  // its own timeout. max(): none of the caller's.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// A key and the raw value the store holds for it, not validated yet.
struct RawRecord {
  std::string key;
  std::string value;
};

struct SyncReply {
  // Identifies the store's current contents: it changes when the store starts again
  // empty (a Redis restart or flush), and then every instance re-publishes.
  std::string incarnation;
  std::uint64_t sequence = 0;  // the newest sequence number: the next cursor
  // The store's clock (Unix ms) when it handled the exchange: the time the changes'
  // until_ms are measured against. The Fleet refuses a reply whose server_ms is not
  // positive (a store that did not say, or said something unreadable).
  std::int64_t server_ms = 0;
  std::vector<std::string> lease_holders;  // one per lease op, in order ("" if none)
  std::vector<RawRecord> changes;          // every key decided after the cursor
  // One per count op, in order: the fleet's totals over the window as raw text (each
  // a decimal count, or anything else if the store held a malformed value).
  struct RawCounts {
    std::string successes, failures;
  };
  std::vector<RawCounts> counts;
  // One per window op, in order: "calls|failures|slow|instances", the fleet's totals over
  // the fresh entries as raw text. A store that found an entry it cannot read replies
  // "malformed|<instance>=<the entry>" instead (and drops the entry), which the Fleet
  // rejects like any value that is not four counts.
  std::vector<std::string> windows;
  // One per op, in order: the sequence of the record the op wrote, 0 if it wrote none.
  // The Fleet tells its own records (this run's) from those of another process under
  // the same instance id (a previous run of a restarted instance) by them.
  std::vector<std::uint64_t> written;
  // What the store found corrupt in its own keys during the exchange and replaced or
  // removed (a counter that is not a number, a key of the wrong type, a record that is
  // not one), one line each naming the key: the Fleet counts them (store_repairs).
  std::vector<std::string> repairs;
  // A store that spreads the keys over several groups (RedisFleetStore with groups > 1)
  // may answer for some of them only, when the others' node failed: then partial_error
  // says why, and `lost` (one per op, else empty) marks with 1 each op it could not
  // deliver, whose lease holder, counts and window totals in the reply mean nothing. The
  // Fleet sends them again (and re-reads every breaker) next time. The changes of the
  // groups that answered are in `changes` as usual.
  std::vector<std::uint8_t> lost;
  std::string partial_error;
};

struct StoreError {
  enum class Kind : std::uint8_t {
    unavailable,  // not connected, connecting failed, or waiting to reconnect
    timeout,      // no answer within the command timeout
    protocol,     // the server answered something this client does not understand
    rejected,     // the server refused (authentication, a script error, a wrong type)
  };
  Kind kind;
  std::string message;
};

constexpr std::string_view to_string(StoreError::Kind k) noexcept {
  switch (k) {
    case StoreError::Kind::unavailable:
      return "unavailable";
    case StoreError::Kind::timeout:
      return "timeout";
    case StoreError::Kind::protocol:
      return "protocol";
    case StoreError::Kind::rejected:
      return "rejected";
  }
  return "unknown";
}

// The seam. exchange() is called from Fleet::sync() only, one call at a time; it must
// return by request.deadline and within its own timeout(), never block indefinitely.
// Lifetime: a store must outlive every Fleet built over it.
class FleetStore {
 public:
  virtual ~FleetStore() = default;
  virtual Expected<SyncReply, StoreError> exchange(const SyncRequest& request) = 0;
  // The longest one exchange may take, all of it (connecting included): the Fleet gives
  // every exchange of one sync() one deadline, the sync's start plus this. Zero (the
  // default): no bound of the store's own, only the caller's deadline.
  virtual std::chrono::milliseconds timeout() const noexcept {
    return std::chrono::milliseconds::zero();
  }
};

// The protocol in one process: what RedisFleetStore's script does, over a map under a
// mutex. Thread-safe; any number of Fleets may share one. set_down() makes exchange()
// fail (an outage), set_latency() makes it sleep first (for the lab and benchmarks,
// not for tests; a latency past the request's deadline sleeps until the deadline and
// fails with `timeout`), restart() forgets everything (a store that came back empty),
// put_raw() plants any value (a malformed one, say) for a key, and erase_raw() loses a
// key's record (as a Redis evicting it would). A record that is not one (put_raw) is
// removed when an exchange reads it and reported in SyncReply::repairs, as the Redis
// script does.
class MemoryFleetStore final : public FleetStore {
 public:
  // `lease_clock_ms` is the store's clock (Unix ms): what leases expire by and every
  // time the store keeps is read from; default: system_clock.
  explicit MemoryFleetStore(std::function<std::int64_t()> lease_clock_ms = {});

  Expected<SyncReply, StoreError> exchange(const SyncRequest& request) override;

  void set_down(bool down);
  void set_latency(std::chrono::nanoseconds latency);
  void restart();
  void put_raw(const std::string& key, std::string value);
  void erase_raw(const std::string& key);
  // Plants `value` as `instance`'s window entry for `key` ("calls|failures|slow|ms").
  void put_raw_window(const std::string& key, const std::string& instance, std::string value);
  std::optional<std::string> get_raw(const std::string& key) const;
  std::uint64_t exchanges() const;

 private:
  struct Lease {
    std::string holder;
    std::int64_t expires_ms;
  };
  void touch(const std::string& key, std::uint64_t sequence);
  void record(const std::string& key, SharedState state, TransitionReason reason,
              std::int64_t until_ms, const std::string& instance, bool fleet_window = false);

  std::function<std::int64_t()> lease_clock_ms_;
  mutable std::mutex mu_;
  bool down_ = false;
  std::chrono::nanoseconds latency_{0};
  std::uint64_t incarnation_ = 1;
  std::uint64_t sequence_ = 0;
  std::uint64_t exchanges_ = 0;
  std::map<std::string, std::string> records_;                        // key -> encoded value
  std::map<std::string, std::uint64_t> changed_;                      // key -> sequence
  std::map<std::uint64_t, std::string> by_sequence_;                  // sequence -> key
  std::map<std::string, std::map<std::string, std::int64_t>> votes_;  // key -> voter -> ms
  std::map<std::string, Lease> leases_;
  // key -> bucket -> (successes, failures)
  std::map<std::string, std::map<std::int64_t, std::pair<std::uint64_t, std::uint64_t>>> counts_;
  // One key's window levels, as the Redis script keeps them: the entries, their running
  // sum and their times; `dirty` (a planted entry) makes the next op re-sum them all.
  struct Window {
    std::map<std::string, std::string> entries;  // instance -> "calls|failures|slow|ms"
    std::uint64_t calls = 0, failures = 0, slow = 0, counted = 0;
    std::multimap<std::int64_t, std::string> by_ms;  // ms -> instance, counted entries only
    bool dirty = false;
  };
  std::map<std::string, Window> windows_;
};

}  // namespace bulwark::redis

#endif  // BULWARK_REDIS_FLEET_STORE_H_
