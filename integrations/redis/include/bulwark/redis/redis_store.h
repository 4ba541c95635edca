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
//   <prefix>seq       the sequence counter; <prefix>id: the store's incarnation
//                     (changes, seq and id expire `idle_ttl` after the last exchange;
//                     a new counter makes a new incarnation: the instances re-publish)
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
// Timeouts. Connecting and every command are bounded (connect_timeout,
// command_timeout, 50 ms by default): exchange() never waits longer. After a failure
// it does not try again before a backoff (exponential from reconnect_min to
// reconnect_max, with jitter) and returns `unavailable` at once until then. Resolving
// `host` is not bounded by the timeouts (getaddrinfo): give an address, or a name the
// machine resolves locally (/etc/hosts).
//
// hiredis 0.14 (Debian 12) speaks plain TCP to one server: no TLS, no Redis Cluster,
// no Sentinel. A deployment that needs them runs a local TLS proxy (stunnel, a
// service mesh sidecar) and points host/port at it, or a proxy that follows the
// primary (HAProxy with a role check, or Sentinel-aware clients in front), or for a
// Cluster a Cluster-aware proxy that routes a script by its first key (above).
//
// Not thread-safe: one Fleet calls exchange(), from its sync().

#ifndef BULWARK_REDIS_REDIS_STORE_H_
#define BULWARK_REDIS_REDIS_STORE_H_

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "bulwark/redis/fleet_store.h"

struct redisContext;

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
  std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(50);
  std::chrono::milliseconds command_timeout = std::chrono::milliseconds(50);
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

  bool connected() const noexcept { return ctx_ != nullptr; }
  std::uint64_t reconnects() const noexcept { return connects_; }
  const RedisConfig& config() const noexcept { return config_; }

  // The Lua script exchange() runs (for tests and tools).
  static const char* script() noexcept;

 private:
  Expected<void, StoreError> connect();
  StoreError fail(StoreError e);  // drops the connection, schedules the next attempt

  RedisConfig config_;
  redisContext* ctx_ = nullptr;
  std::string sha_;
  std::chrono::steady_clock::time_point next_attempt_{};
  std::uint32_t failures_ = 0;
  std::uint64_t connects_ = 0;
  std::minstd_rand rng_;
};

}  // namespace bulwark::redis

#endif  // BULWARK_REDIS_REDIS_STORE_H_
