// bulwark/redis/redis_store.h — the fleet's decisions in Redis (hiredis).
//
// One Redis command per exchange: an EVALSHA of a small Lua script that applies the
// instance's ops (votes, closes, re-publications, lease requests, window levels) and
// returns the decisions made since its cursor, atomically. A sync is one exchange, two
// when it trips a fleet window (fleet.h). Keys live under `prefix`, each with a TTL set
// by the write that makes it, so nothing lingers once the fleet stops using a key:
//   <prefix>k:<key>   the decision (a string, fleet_store.h's format); expires
//                     `retention` after its open period ends (closed: after each write).
//                     An expired record is no record: the key is closed for the fleet
//   <prefix>v:<key>   votes to open (a sorted set: instance -> ms), twice the quorum window
//   <prefix>l:<key>   the half-open lease (a string: the holder), SET NX PX lease
//   <prefix>changes   key -> sequence of its last decision (a sorted set); each exchange
//                     drops the oldest entries (up to 8) whose record expired
//   <prefix>seq       the sequence counter; <prefix>id: the store's incarnation;
//                     <prefix>run: the run_id of the Redis process that made it
//                     (changes, seq, id and run expire `idle_ttl` after the last
//                     exchange; a new counter, or another Redis process (a restart, from
//                     a snapshot or empty, a failover), makes a new incarnation: the
//                     instances read from the start and re-publish)
//   <prefix>w:<key>:<bucket>  fleet-wide counts (a hash: s, f), the count window plus a bucket
//   <prefix>fw:<key>  fleet window levels (a hash: instance -> "calls|failures|slow|ms",
//                     and field "=" -> their running sum "calls|failures|slow|entries")
//   <prefix>ft:<key>  the levels' times (a sorted set: instance -> ms), to drop stale ones;
//                     both expire three sync intervals after the last write
// The prefix holds a Redis Cluster hash tag ("{bulwark}:fleet:"): every key of one
// prefix, every breaker's, lies in one slot, as the script (which touches several) needs.
// The script's one KEYS argument is <prefix>seq, so a Cluster-aware proxy routes it to
// that slot's node. One prefix is one slot: spread a large deployment over shards with
// several prefixes (one per service). The expiries cost each exchange a few commands
// inside the script (three PEXPIREs, a ZRANGE of 8 and an EXISTS per entry), no round
// trip.
//
// Corrupt keys. The script checks every key it reads before it uses it: a key of the
// wrong type, a counter that is not a number below 2^50, a record that is not one, a
// vote or window level stamped in the future, a lease without an expiry. It replaces
// or removes what is corrupt (a new counter starts a new incarnation) and reports each
// repair in SyncReply::repairs, which the Fleet counts (store_repairs): a corrupt key
// never stops the fleet's exchanges, and needs no operator.
//
// Timeouts. One deadline bounds each exchange(), all of it: connecting, AUTH, SCRIPT
// LOAD and the script (`timeout`, 500 ms by default; SyncRequest::deadline if that is
// sooner). Reads and writes wait for the socket with poll() up to what is left of it,
// so no server, however slowly it trickles its reply, holds an exchange longer. After
// a failure the store does not try again before a backoff (exponential from
// reconnect_min to reconnect_max, with jitter) and returns `unavailable` at once until
// then. Resolving `host` is not bounded by the deadline (getaddrinfo): give an
// address, or a name the machine resolves locally (/etc/hosts).
//
// hiredis 0.14 (Debian 12) speaks plain TCP to one server: no TLS, no Redis Cluster,
// no Sentinel. A deployment that needs them runs a local TLS proxy (stunnel, a
// service mesh sidecar) and points host/port at it, or a proxy that follows the
// primary (HAProxy with a role check, or Sentinel-aware clients in front). For a
// Cluster, RedisClusterStore (cluster_store.h) routes by itself and spreads the keys
// over several slots; a Cluster-aware proxy that routes a script by its first key
// (above) works with this store too.
//
// Thread-safety: one exchange() at a time (one Fleet's sync()); a second one that
// starts while the first runs on another thread returns `rejected` at once, naming
// the problem, and touches nothing. connected() and reconnects() may be read from any
// thread.
//
// Lifetime: the store must outlive every Fleet over it. Destroying it waits for an
// exchange() running on another thread to return (by its deadline), then closes the
// connection, whatever state it is in (a reply half read, a request half written):
// nothing is left behind, and no reply is read later.

#ifndef BULWARK_REDIS_REDIS_STORE_H_
#define BULWARK_REDIS_REDIS_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "bulwark/redis/fleet_store.h"

struct redisContext;
struct redisReply;

namespace bulwark::redis {

struct RedisConfig {
  std::string host = "127.0.0.1";
  int port = 6379;
  // AUTH: with a username (Redis 6 ACLs) as AUTH <username> <password>, else
  // AUTH <password>. Empty password: no AUTH.
  std::string username{};
  std::string password{};
  // Every key this store writes starts with it: no spaces or control characters, and a
  // non-empty hash tag "{...}" (the part Redis Cluster hashes), so one slot holds all.
  std::string prefix = "{bulwark}:fleet:";
  // How long a decision stays readable after it stops mattering: after the end of an
  // open's period, after a close is written. Instances away longer miss it (an expired
  // close leaves them to their own open period). Positive.
  std::chrono::milliseconds retention = std::chrono::hours(1);
  // With no exchange for this long, the counter, the incarnation and the changes set
  // expire too: the prefix holds nothing. At least retention.
  std::chrono::milliseconds idle_ttl = std::chrono::hours(24);
  // The most one exchange() takes, connecting included (see "Timeouts" above). Positive.
  std::chrono::milliseconds timeout = std::chrono::milliseconds(500);
  std::chrono::milliseconds reconnect_min = std::chrono::milliseconds(100);
  std::chrono::milliseconds reconnect_max = std::chrono::seconds(5);
};

class RedisFleetStore final : public FleetStore {
 public:
  // Validates `config` (throws InvalidConfig naming the field). Does not connect: the
  // first exchange() does.
  explicit RedisFleetStore(RedisConfig config);
  RedisFleetStore(const RedisFleetStore&) = delete;
  RedisFleetStore& operator=(const RedisFleetStore&) = delete;
  ~RedisFleetStore() override;

  Expected<SyncReply, StoreError> exchange(const SyncRequest& request) override;
  std::chrono::milliseconds timeout() const noexcept override { return config_.timeout; }

  bool connected() const noexcept { return connected_.load(std::memory_order_relaxed); }
  std::uint64_t reconnects() const noexcept { return connects_.load(std::memory_order_relaxed); }
  const RedisConfig& config() const noexcept { return config_; }

  // The Lua script exchange() runs (for tests and tools).
  static const char* script() noexcept;

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  Expected<void, StoreError> connect(Deadline deadline);
  // Sends what hiredis holds for the server and reads one reply, by the deadline.
  Expected<redisReply*, StoreError> round_trip(Deadline deadline, const char* what);
  StoreError fail(StoreError e);  // drops the connection, schedules the next attempt
  Expected<SyncReply, StoreError> exchange_locked(const SyncRequest& request);

  RedisConfig config_;
  std::mutex mu_;  // held by exchange() and the destructor
  redisContext* ctx_ = nullptr;
  std::string sha_;
  std::chrono::steady_clock::time_point next_attempt_{};
  std::uint32_t failures_ = 0;
  std::atomic<bool> connected_{false};
  std::atomic<std::uint64_t> connects_{0};
  std::minstd_rand rng_;
};

}  // namespace bulwark::redis

#endif  // BULWARK_REDIS_REDIS_STORE_H_
