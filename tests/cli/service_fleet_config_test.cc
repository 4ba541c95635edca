// bulwark::config's [fleet.NAME] and [fleet.NAME.store]: a Redis fleet's settings in the
// policies file — every key, the environment's overrides (the instance id and the
// password verbatim), errors (file, line, key, suggestion, bounds), reload(), and, with
// bulwark::redis, bulwark/config/redis.h building a Fleet and its stores from them.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "bulwark/config/config.h"
#include "config_test_support.h"

#ifdef BULWARK_TEST_REDIS
#include "bulwark/config/redis.h"
#include "bulwark/redis/cluster_store.h"
#include "bulwark/redis/fleet.h"
#include "bulwark/redis/fleet_store.h"
#include "bulwark/redis/redis_store.h"
#endif

namespace {

using namespace std::chrono_literals;
using bulwark::config::ConfigError;
using bulwark::config::Environment;

// Every key, none at its default.
const std::string kFile = R"([breaker.inventory]
consecutive_failures = 5

[fleet.checkout]
instance = "checkout-0"
quorum = 3
quorum_window = "20s"
sync_interval = "250ms"
lease_duration = "2s"
queue_capacity = 512
max_changes_per_sync = 200
count_bucket = "10s"
count_buckets = 12

[fleet.checkout.store]
host = "10.0.0.5"
port = 7000
username = "fleet"
prefix = "{checkout}:fleet:"
retention = "30min"
idle_ttl = "12h"
timeout = "300ms"
reconnect_min = "50ms"
reconnect_max = "2s"
cluster = true
seeds = ["10.0.0.6:7000", "10.0.0.7:7000"]
groups = 16
heartbeat = "2min"

[fleet.search]
instance = "search-0"
)";

// A password always comes from the environment in these tests, as the docs say it should.
const Environment kSecret{{"BULWARK__FLEET__CHECKOUT__STORE__PASSWORD", "s3cret"}};

bulwark::config::Policies parse(const std::string& text, const Environment& env = kSecret) {
  return bulwark::testing::parse_policies(text, env);
}
using bulwark::testing::expect_config_error;
constexpr auto& expect_error = expect_config_error;
constexpr auto& write = bulwark::testing::write_temp_file;

TEST(FleetConfigFile, EveryKeyArrives) {
  const bulwark::config::Config cfg("svc.toml", parse(kFile), {});
  const bulwark::config::FleetSettings f = cfg.fleet("checkout");
  EXPECT_EQ(f.name, "checkout");
  EXPECT_EQ(f.instance, "checkout-0");
  EXPECT_EQ(f.quorum, 3u);
  EXPECT_EQ(f.quorum_window, 20s);
  EXPECT_EQ(f.sync_interval, 250ms);
  EXPECT_EQ(f.lease_duration, 2s);
  EXPECT_EQ(f.queue_capacity, 512u);
  EXPECT_EQ(f.max_changes_per_sync, 200u);
  EXPECT_EQ(f.count_bucket, 10s);
  EXPECT_EQ(f.count_buckets, 12u);
  EXPECT_EQ(f.store.host, "10.0.0.5");
  EXPECT_EQ(f.store.port, 7000);
  EXPECT_EQ(f.store.username, "fleet");
  EXPECT_EQ(f.store.password, "s3cret");
  EXPECT_EQ(f.store.prefix, "{checkout}:fleet:");
  EXPECT_EQ(f.store.retention, 30min);
  EXPECT_EQ(f.store.idle_ttl, 12h);
  EXPECT_EQ(f.store.timeout, 300ms);
  EXPECT_EQ(f.store.reconnect_min, 50ms);
  EXPECT_EQ(f.store.reconnect_max, 2s);
  EXPECT_TRUE(f.store.cluster);
  EXPECT_EQ(f.store.seeds, (std::vector<std::string>{"10.0.0.6:7000", "10.0.0.7:7000"}));
  EXPECT_EQ(f.store.groups, 16u);
  EXPECT_EQ(f.store.heartbeat, 2min);
  EXPECT_TRUE(cfg.warnings().empty());  // the password came from the environment

  // Unset keys keep the redis library's defaults; no store table: one local server.
  const bulwark::config::FleetSettings s = cfg.fleet("search");
  EXPECT_EQ(s.quorum, 1u);
  EXPECT_EQ(s.quorum_window, 10s);
  EXPECT_EQ(s.sync_interval, 200ms);
  EXPECT_EQ(s.lease_duration, 0ms);
  EXPECT_EQ(s.queue_capacity, 4096u);
  EXPECT_EQ(s.max_changes_per_sync, 1000u);
  EXPECT_EQ(s.count_bucket, 0ms);
  EXPECT_EQ(s.count_buckets, 6u);
  EXPECT_EQ(s.store.host, "127.0.0.1");
  EXPECT_EQ(s.store.port, 6379);
  EXPECT_EQ(s.store.prefix, "{bulwark}:fleet:");
  EXPECT_EQ(s.store.retention, 1h);
  EXPECT_EQ(s.store.idle_ttl, 24h);
  EXPECT_EQ(s.store.timeout, 500ms);
  EXPECT_FALSE(s.store.cluster);
  EXPECT_EQ(s.store.groups, 1u);
  EXPECT_EQ(s.store.heartbeat, 0ms);

  try {
    (void)cfg.fleet("payments");
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "fleet.payments");
    EXPECT_NE(e.message().find("there are \"checkout\", \"search\""), std::string::npos)
        << e.what();
  }
}

TEST(FleetConfigFile, TheEnvironmentSetsTheInstanceAndThePasswordVerbatim) {
  // Per pod and from a secret: text as it is, even when it reads as TOML (a number, a
  // quoted string, a comment); the store table is created when the file has none.
  const Environment env{{"BULWARK__FLEET__CHECKOUT__INSTANCE", "checkout-7f9c"},
                        {"BULWARK__FLEET__CHECKOUT__STORE__PASSWORD", "\"12345\" # x"},
                        {"BULWARK__FLEET__CHECKOUT__STORE__PORT", "7001"},
                        {"BULWARK__FLEET__CHECKOUT__QUORUM_WINDOW", "5s"},
                        {"BULWARK__FLEET__CHECKOUT__STORE__SEEDS", "[\"10.0.0.9:7000\"]"},
                        {"BULWARK__FLEET__SEARCH__INSTANCE", "123"},
                        {"BULWARK__FLEET__SEARCH__STORE__PASSWORD", "654321"},
                        {"BULWARK__FLEET__SEARCH__STORE__HOST", "redis.internal"}};
  const auto p = parse(kFile, env);
  const auto& f = p.fleets.at("checkout");
  EXPECT_EQ(f.instance, "checkout-7f9c");
  EXPECT_EQ(f.store.password, "\"12345\" # x");
  EXPECT_EQ(f.store.port, 7001);
  EXPECT_EQ(f.quorum_window, 5s);
  EXPECT_EQ(f.store.seeds, (std::vector<std::string>{"10.0.0.9:7000"}));
  const auto& s = p.fleets.at("search");
  EXPECT_EQ(s.instance, "123");
  EXPECT_EQ(s.store.password, "654321");
  EXPECT_EQ(s.store.host, "redis.internal");
  EXPECT_TRUE(p.warnings.empty());
}

TEST(FleetConfigFile, APasswordInTheFileLoadsWithAWarning) {
  std::string text = kFile;
  text.replace(text.find("username = \"fleet\""), 18, "username = \"fleet\"\npassword = \"pw\"");
  const auto p = parse(text, {});
  EXPECT_EQ(p.fleets.at("checkout").store.password, "pw");
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_EQ(p.warnings[0].field(), "fleet.checkout.store.password");
  EXPECT_NE(p.warnings[0].message().find("BULWARK__FLEET__CHECKOUT__STORE__PASSWORD"),
            std::string::npos);
  EXPECT_EQ(std::string(p.warnings[0].what()).find("\"pw\""), std::string::npos);
  // The environment's value replaces it, and the warning goes.
  EXPECT_TRUE(parse(text).warnings.empty());
}

TEST(FleetConfigFile, ErrorsNameFileLineKeyAndBound) {
  const std::string head = "[fleet.f]\ninstance = \"a\"\n";
  expect_error(head + "quorum_windw = \"5s\"\n", {}, "svc.toml:3:1", "fleet.f.quorum_windw",
               "did you mean \"quorum_window\"?");
  expect_error(head + "[fleet.f.store]\npasword = \"x\"\n", {}, "svc.toml:4:1",
               "fleet.f.store.pasword", "did you mean \"password\"?");
  expect_error(head + "lease_duration = \"-1s\"\n", {}, "svc.toml:3:18", "fleet.f.lease_duration",
               "must not be negative (got \"-1s\")");
  expect_error(head + "sync_interval = \"0s\"\n", {}, "svc.toml:3:17", "fleet.f.sync_interval",
               "must be positive");
  expect_error(head + "sync_interval = \"500us\"\n", {}, "svc.toml:3:17", "fleet.f.sync_interval",
               "must be a whole number of milliseconds");
  expect_error(head + "quorum = 0\n", {}, "svc.toml:3:10", "fleet.f.quorum", "at least 1");
  expect_error(head + "max_changes_per_sync = 100001\n", {}, "svc.toml:3:24",
               "fleet.f.max_changes_per_sync", "at most 100000");
  expect_error(head + "count_buckets = 1001\n", {}, "svc.toml:3:17", "fleet.f.count_buckets",
               "at most 1000");
  expect_error(head + "queue_capacity = 0\n", {}, "svc.toml:3:18", "fleet.f.queue_capacity",
               "at least 1");
  expect_error("[fleet.f]\nquorum = 2\n", {}, "svc.toml:1:1", "fleet.f",
               "missing required key \"instance\" in [fleet.f] (this instance's id in the "
               "fleet; usually set per instance: BULWARK__FLEET__F__INSTANCE)");
  expect_error("[fleet.f]\ninstance = \"pod 1\"\n", {}, "svc.toml:2:12", "fleet.f.instance",
               "must be 1-64 characters from [A-Za-z0-9._:-]");
  const std::string store = head + "[fleet.f.store]\n";
  expect_error(store + "groups = 0\n", {}, "svc.toml:4:10", "fleet.f.store.groups",
               "must be in 1..1000, got 0");
  expect_error(store + "groups = 1001\n", {}, "svc.toml:4:10", "fleet.f.store.groups",
               "must be in 1..1000, got 1001");
  expect_error(store + "groups = -1\n", {}, "svc.toml:4:10", "fleet.f.store.groups",
               "must not be negative");
  expect_error(store + "idle_ttl = \"2h\"\nheartbeat = \"2h\"\n", {}, "svc.toml:5:13",
               "fleet.f.store.heartbeat",
               "must be below idle_ttl (2h), or a quiet group's keys expire between two "
               "heartbeats");
  expect_error(store + "port = 70000\n", {}, "svc.toml:4:8", "fleet.f.store.port",
               "must be at most 65535");
  expect_error(store + "timeout = \"-300ms\"\n", {}, "svc.toml:4:11", "fleet.f.store.timeout",
               "must not be negative");
  expect_error(store + "retention = \"2h\"\nidle_ttl = \"1h\"\n", {}, "svc.toml:5:12",
               "fleet.f.store.idle_ttl", "must be at least retention (2h)");
  expect_error(store + "reconnect_max = \"10ms\"\n", {}, "svc.toml:4:17",
               "fleet.f.store.reconnect_max", "must be at least reconnect_min");
  expect_error(store + "prefix = \"bulwark:fleet:\"\n", {}, "svc.toml:4:10", "fleet.f.store.prefix",
               "must contain a hash tag");
  expect_error(store + "prefix = \"{}:fleet:\"\n", {}, "svc.toml:4:10", "fleet.f.store.prefix",
               "has an empty hash tag");
  expect_error(store + "username = \"u\"\n", {}, "svc.toml:3:1", "fleet.f.store.password",
               "must be set when username is");
  expect_error(store + "seeds = [\"a:1\", \"b\"]\n", {}, "svc.toml:4:17", "fleet.f.store.seeds",
               "\"b\" is not host:port");
  expect_error(store + "cluster = \"yes\"\n", {}, "svc.toml:4:11", "fleet.f.store.cluster",
               "expected true or false");
  // From the environment: the variable is named.
  expect_error(head, {{"BULWARK__FLEET__F__STORE__GROUPS", "0"}},
               "environment variable BULWARK__FLEET__F__STORE__GROUPS:1:5", "fleet.f.store.groups",
               "must be in 1..1000, got 0");
  expect_error(head, {{"BULWARK__FLEET__F__INSTANCE", "pod 1"}},
               "environment variable BULWARK__FLEET__F__INSTANCE:1:5", "fleet.f.instance",
               "must be 1-64 characters");
  expect_error(head, {{"BULWARK__FLEET__G__INSTANCE", "a"}},
               "environment variable BULWARK__FLEET__G__INSTANCE", "",
               "the file has no fleet named \"g\"");
}

TEST(FleetConfigFile, AReloadWithABadFleetValueChangesNothingAndSaysWhy) {
  const std::string path = write("fleet_reload.toml", kFile);
  bulwark::config::Config cfg = bulwark::config::load_file(path, kSecret);
  EXPECT_EQ(cfg.fleet("checkout").store.groups, 16u);

  std::string next = kFile;
  next.replace(next.find("groups = 16"), 11, "groups = 32");
  write("fleet_reload.toml", next);
  ASSERT_FALSE(cfg.reload().has_value());
  EXPECT_EQ(cfg.fleet("checkout").store.groups, 32u);
  EXPECT_EQ(cfg.fleet("checkout").store.password, "s3cret");  // the same environment

  next.replace(next.find("groups = 32"), 11, "groups = 0 ");
  next.replace(next.find("quorum = 3"), 10, "quorum = 4");
  write("fleet_reload.toml", next);
  const auto error = cfg.reload();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->field(), "fleet.checkout.store.groups");
  EXPECT_EQ(error->where().line, 27u);
  EXPECT_NE(error->message().find("must be in 1..1000"), std::string::npos);
  EXPECT_EQ(cfg.fleet("checkout").store.groups, 32u);
  EXPECT_EQ(cfg.fleet("checkout").quorum, 3u);
}

#ifdef BULWARK_TEST_REDIS
TEST(FleetConfigFile, TheBridgeBuildsAFleetAndItsStores) {
  const bulwark::config::Config cfg("svc.toml", parse(kFile), {});
  bool queued = false;
  bulwark::redis::FleetConfig base;
  base.on_queued = [&](const std::string&, bulwark::State) { queued = true; };
  const bulwark::redis::FleetConfig fc = bulwark::config::fleet_config(cfg, "checkout", base);
  EXPECT_EQ(fc.instance, "checkout-0");
  EXPECT_EQ(fc.quorum, 3u);
  EXPECT_EQ(fc.quorum_window, 20s);
  EXPECT_EQ(fc.sync_interval, 250ms);
  EXPECT_EQ(fc.lease_duration, 2s);
  EXPECT_EQ(fc.queue_capacity, 512u);
  EXPECT_EQ(fc.max_changes_per_sync, 200u);
  EXPECT_EQ(fc.count_bucket, 10s);
  EXPECT_EQ(fc.count_buckets, 12u);
  ASSERT_TRUE(fc.on_queued);  // what a file cannot hold comes from `base`
  fc.on_queued("k", bulwark::State::open);
  EXPECT_TRUE(queued);

  bulwark::redis::MemoryFleetStore memory;
  bulwark::redis::Fleet fleet(fc, memory);
  EXPECT_EQ(fleet.config().instance, "checkout-0");

  // A Cluster store: constructed (and validated by the redis library), not connected.
  bulwark::redis::RedisClusterStore cluster(bulwark::config::store_config(cfg, "checkout"));
  EXPECT_TRUE(cluster.config().cluster);
  EXPECT_EQ(cluster.config().groups, 16u);
  EXPECT_EQ(cluster.heartbeat(), 2min);
  EXPECT_EQ(cluster.config().seeds.size(), 2u);
  EXPECT_EQ(cluster.config().redis.host, "10.0.0.5");
  EXPECT_EQ(cluster.config().redis.port, 7000);
  EXPECT_EQ(cluster.config().redis.username, "fleet");
  EXPECT_EQ(cluster.config().redis.password, "s3cret");
  EXPECT_EQ(cluster.config().redis.prefix, "{checkout}:fleet:");
  EXPECT_EQ(cluster.config().redis.retention, 30min);
  EXPECT_EQ(cluster.config().redis.idle_ttl, 12h);
  EXPECT_EQ(cluster.config().redis.reconnect_min, 50ms);
  EXPECT_EQ(cluster.config().redis.reconnect_max, 2s);
  EXPECT_EQ(cluster.timeout(), 300ms);
  bulwark::redis::Fleet over_cluster(bulwark::config::fleet_config(cfg, "checkout"), cluster);

  // One server: the same store with cluster = false, or RedisFleetStore.
  bulwark::redis::RedisClusterStore one(bulwark::config::store_config(cfg, "search"));
  EXPECT_FALSE(one.config().cluster);
  EXPECT_EQ(one.config().groups, 1u);
  EXPECT_EQ(one.heartbeat(), 5min);  // the default: idle_ttl / 8 = 3h, at most 5 min
  EXPECT_EQ(one.group_prefix(0), "{bulwark}:fleet:");
  bulwark::redis::RedisFleetStore server(bulwark::config::redis_config(cfg, "search"));
  EXPECT_EQ(server.config().host, "127.0.0.1");
  EXPECT_EQ(server.config().port, 6379);
  try {
    (void)bulwark::config::redis_config(cfg, "checkout");
    ADD_FAILURE() << "a RedisFleetStore cannot take a Cluster's settings";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "fleet.checkout.store");
  }
  EXPECT_THROW((void)bulwark::config::fleet_config(cfg, "nosuch"), ConfigError);
  EXPECT_THROW((void)bulwark::config::store_config(cfg, "nosuch"), ConfigError);
}
#endif

}  // namespace
