// bulwark/config/redis.h — a Redis fleet's settings from a policies file.
//
// A `[fleet.NAME]` of the file (bulwark/config/config.h) holds a redis::Fleet's settings,
// and its `[fleet.NAME.store]` the Redis store's, by the field names of FleetConfig,
// RedisConfig and ClusterConfig. These turn them into the redis library's types:
//
//   bulwark::config::Config cfg = bulwark::config::load_file("resilience.toml");
//   bulwark::redis::RedisClusterStore store(bulwark::config::store_config(cfg, "checkout"));
//   bulwark::redis::Fleet fleet(bulwark::config::fleet_config(cfg, "checkout"), store);
//
// Which store: RedisClusterStore over store_config() serves both a Redis Cluster
// (`cluster = true`) and one server (`cluster = false`, the file's default; with
// `groups = 1` its keys are RedisFleetStore's, and either store may serve the same
// deployment). RedisFleetStore over redis_config() is the one-server store alone; it
// takes no cluster, seeds or groups, so redis_config() refuses a file that sets them.
//
// The values were checked when the file loaded; the redis constructors check them again
// (InvalidConfig). A reload (Config::reload) does not reach a live Fleet or store: their
// new settings take effect in the next ones built.
//
// Header-only: it is compiled by an application that links bulwark::redis and
// bulwark::config; neither library depends on the other. Each call costs a lookup and
// copies (not for a call path); thread-safe as Config's getters are.

#ifndef BULWARK_CONFIG_REDIS_H_
#define BULWARK_CONFIG_REDIS_H_

#include <string_view>
#include <utility>

#include "bulwark/config/config.h"
#include "bulwark/redis/cluster_store.h"
#include "bulwark/redis/fleet.h"
#include "bulwark/redis/redis_store.h"

namespace bulwark::config {

namespace detail {
inline redis::RedisConfig redis_part(const FleetStoreSettings& s) {
  redis::RedisConfig r;
  r.host = s.host;
  r.port = s.port;
  r.username = s.username;
  r.password = s.password;
  r.prefix = s.prefix;
  r.retention = s.retention;
  r.idle_ttl = s.idle_ttl;
  r.timeout = s.timeout;
  r.reconnect_min = s.reconnect_min;
  r.reconnect_max = s.reconnect_max;
  return r;
}
}  // namespace detail

// The Fleet's settings `[fleet.NAME]` gives; `base` keeps what a file cannot hold
// (on_queued, wall_ms). Throws ConfigError for an unknown fleet.
inline redis::FleetConfig fleet_config(const Config& cfg, std::string_view name,
                                       redis::FleetConfig base) {
  const FleetSettings f = cfg.fleet(name);
  base.instance = f.instance;
  base.quorum = f.quorum;
  base.quorum_window = f.quorum_window;
  base.sync_interval = f.sync_interval;
  base.lease_duration = f.lease_duration;
  base.queue_capacity = f.queue_capacity;
  base.max_changes_per_sync = f.max_changes_per_sync;
  base.count_bucket = f.count_bucket;
  base.count_buckets = f.count_buckets;
  return base;
}
inline redis::FleetConfig fleet_config(const Config& cfg, std::string_view name) {
  return fleet_config(cfg, name, redis::FleetConfig{});
}

// The server's settings of `[fleet.NAME.store]` (RedisFleetStore's; RedisConfig's
// defaults for what the file leaves out). Throws ConfigError for an unknown fleet, or if
// the store sets `cluster = true`, `seeds`, `groups` other than 1 or `heartbeat`
// (RedisClusterStore's alone: use store_config()).
inline redis::RedisConfig redis_config(const Config& cfg, std::string_view name) {
  const FleetStoreSettings s = cfg.fleet(name).store;
  if (s.cluster || !s.seeds.empty() || s.groups != 1 ||
      s.heartbeat != std::chrono::milliseconds::zero()) {
    throw ConfigError({cfg.path()}, "fleet." + lab::escape_for_error(name) + ".store",
                      "sets cluster, seeds, groups or heartbeat: build a RedisClusterStore "
                      "(bulwark::config::store_config), not a RedisFleetStore");
  }
  return detail::redis_part(s);
}

// The whole store of `[fleet.NAME.store]`, for a RedisClusterStore: a Cluster or one
// server (`cluster`), its seeds and groups. Throws ConfigError for an unknown fleet.
inline redis::ClusterConfig store_config(const Config& cfg, std::string_view name) {
  const FleetStoreSettings s = cfg.fleet(name).store;
  redis::ClusterConfig c;
  c.redis = detail::redis_part(s);
  c.cluster = s.cluster;
  c.seeds = s.seeds;
  c.groups = s.groups;
  c.heartbeat = s.heartbeat;
  return c;
}

}  // namespace bulwark::config

#endif  // BULWARK_CONFIG_REDIS_H_
