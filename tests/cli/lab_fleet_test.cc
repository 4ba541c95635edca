// The fleet in `bulwark simulate` (bulwark/lab/fleet.h): the built-in fleet scenario
// meets the requirement's goals (ratios of calls counted in virtual time), runs are
// deterministic, a store that is down makes sharing behave exactly like isolation,
// bad [fleet] values are clear errors, the sharded store model (3 nodes, a failover)
// keeps the gains and every open, and the CLI runs it. In a build without
// bulwark::redis, every fleet run is the clear "no fleet support" error.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/fleet.h"
#include "bulwark/lab/input_error.h"
#include "process.h"

namespace bulwark::lab {
namespace {

using namespace std::chrono_literals;

// The built-in fleet scenario, shortened: 2 min, the reviews service degraded from
// 20 s to 1min 40s, 40 instances.
Scenario short_fleet(std::uint32_t instances = 40) {
  Scenario s = builtin_fleet_scenario();
  s.duration = 2min;
  s.dependency.phases[1].start = 20s;
  s.dependency.phases[2].start = 100s;
  s.fleet->instances = instances;
  return s;
}

#if defined(BULWARK_LAB_FLEET)

const FleetRun& run_named(const FleetConfigurationResult& c, const std::string& name) {
  return name == "single" ? c.single : name == "isolated" ? c.isolated : c.shared;
}

TEST(Fleet, TheBuiltInFleetScenarioMeetsTheGoals) {
  const Scenario s = builtin_fleet_scenario();
  ASSERT_TRUE(s.fleet);
  EXPECT_EQ(s.fleet->instances, 100u);
  const FleetSimulationResult r = simulate_fleet(s);
  ASSERT_EQ(r.configurations.size(), 1u);
  const FleetConfigurationResult& c = r.configurations[0];
  EXPECT_EQ(c.configuration, "after");
  // Every run sees the same traffic in all.
  EXPECT_NEAR(static_cast<double>(c.isolated.total.requests),
              static_cast<double>(c.single.total.requests), 0.02 * 240'000);
  EXPECT_EQ(c.isolated.total.requests, c.shared.total.requests);
  EXPECT_EQ(c.single.instances, 1u);
  EXPECT_EQ(c.isolated.instances, 100u);
  EXPECT_EQ(c.shared.instances, 100u);

  const double single = static_cast<double>(c.single.total.calls_while_degraded);
  const double isolated = static_cast<double>(c.isolated.total.calls_while_degraded);
  const double shared = static_cast<double>(c.shared.total.calls_while_degraded);
  ASSERT_GT(single, 0);
  ASSERT_GT(shared, 0);
  EXPECT_GE(isolated / shared, 5.0) << "isolated " << isolated << ", shared " << shared;
  EXPECT_LE(shared / single, 1.5) << "single " << single << ", shared " << shared;
  EXPECT_DOUBLE_EQ(c.goals.isolated_over_shared, isolated / shared);
  EXPECT_DOUBLE_EQ(c.goals.shared_over_single, shared / single);

  // Every instance opened; the whole fleet within a sync interval and a round trip of
  // the first, where isolated instances spread over seconds.
  ASSERT_TRUE(c.shared.first_open && c.shared.last_open);
  ASSERT_TRUE(c.isolated.first_open && c.isolated.last_open);
  EXPECT_EQ(c.shared.never_opened, 0u);
  EXPECT_LE(*c.shared.last_open - *c.shared.first_open,
            s.fleet->sync_interval + s.fleet->store_latency);
  EXPECT_GT(*c.isolated.last_open - *c.isolated.first_open, 1s);
  EXPECT_TRUE(c.goals.all());

  // One exchange per instance per sync interval, and the ones woken by a local opening.
  const double ticks = 100.0 * 600 / 0.2;
  EXPECT_GE(static_cast<double>(c.shared.store_exchanges), ticks - 100);
  EXPECT_LE(static_cast<double>(c.shared.store_exchanges), ticks + 100 * 40);
  EXPECT_EQ(c.shared.sync_errors, 0u);
  EXPECT_EQ(c.isolated.store_exchanges, 0u);
}

TEST(Fleet, TwoRunsGiveTheSameResult) {
  const Scenario s = short_fleet();
  EXPECT_EQ(fleet_to_json(simulate_fleet(s)), fleet_to_json(simulate_fleet(s)));
}

TEST(Fleet, TheInstancesDrawTheirOwnArrivals) {
  const FleetSimulationResult r = simulate_fleet(short_fleet());
  const FleetRun& iso = r.configurations[0].isolated;
  // Isolated instances with their own arrival streams open at different times.
  ASSERT_TRUE(iso.first_open && iso.last_open);
  EXPECT_LT(*iso.first_open, *iso.last_open);
}

TEST(Fleet, AStoreThatIsDownMakesSharingBehaveAsIsolation) {
  Scenario s = short_fleet();
  s.fleet->outages = {{0s, s.duration}};
  const FleetSimulationResult r = simulate_fleet(s);
  const FleetConfigurationResult& c = r.configurations[0];
  EXPECT_EQ(c.shared.sync_errors, c.shared.store_exchanges);
  EXPECT_GT(c.shared.store_exchanges, 0u);
  EXPECT_EQ(c.shared.store_ops, 0u);
  // Not one decision crossed: the same calls, pages and openings as isolated instances.
  EXPECT_EQ(c.shared.total.calls_while_degraded, c.isolated.total.calls_while_degraded);
  EXPECT_EQ(c.shared.total.served_degraded, c.isolated.total.served_degraded);
  EXPECT_EQ(c.shared.time_to_open, c.isolated.time_to_open);
}

TEST(Fleet, AnOutageDuringTheIncidentCostsCallsAndTheFleetRecovers) {
  Scenario s = short_fleet();
  const FleetSimulationResult healthy = simulate_fleet(s);
  s.fleet->outages = {{15s, 30s}};  // down as the degradation starts
  const FleetSimulationResult r = simulate_fleet(s);
  const FleetConfigurationResult& c = r.configurations[0];
  EXPECT_GT(c.shared.sync_errors, 0u);
  EXPECT_LT(c.shared.sync_errors, c.shared.store_exchanges);
  EXPECT_GT(c.shared.total.calls_while_degraded,
            healthy.configurations[0].shared.total.calls_while_degraded);
  EXPECT_LE(c.shared.total.calls_while_degraded, c.isolated.total.calls_while_degraded);
  EXPECT_EQ(c.shared.total.lost + c.shared.total.served_full + c.shared.total.served_degraded +
                c.shared.total.failed,
            c.shared.total.requests);
}

// tools/examples/fleet_10k.toml (3 store nodes, 16 groups, the key's node failing
// mid-incident and its replica taking over empty) at 200 instances, the same 2 pages per
// second each.
Scenario sharded_fleet() {
  Scenario s =
      load_scenario_file(std::string(BULWARK_SOURCE_DIR) + "/tools/examples/fleet_10k.toml");
  s.fleet->instances = 200;
  s.arrivals.rate = 400;
  return s;
}

const FleetNodeLoad& key_node(const FleetRun& r) {
  for (const FleetNodeLoad& n : r.nodes) {
    if (n.holds_key) return n;
  }
  throw std::logic_error("no node holds the key");
}

TEST(FleetSharded, TheGainsHoldThroughAFailoverAndNoOpenIsLost) {
  const Scenario s = sharded_fleet();
  ASSERT_EQ(s.fleet->nodes, 3u);
  ASSERT_EQ(s.fleet->groups, 16u);
  ASSERT_TRUE(s.fleet->failover);
  ASSERT_FALSE(s.fleet->failover->replica_kept);
  const FleetSimulationResult r = simulate_fleet(s);
  const FleetConfigurationResult& c = r.configurations[0];
  EXPECT_GE(c.goals.isolated_over_shared, 5.0);
  EXPECT_TRUE(c.goals.open_together);
  EXPECT_EQ(c.shared.never_opened, 0u);

  // The node holding the key failed while the fleet held it open, and came back empty;
  // the instances published the open again within a sync interval and a round trip, and
  // not one of them closed meanwhile.
  ASSERT_TRUE(c.shared.failover);
  const FleetFailoverOutcome& o = *c.shared.failover;
  EXPECT_TRUE(o.key_on_node);
  EXPECT_TRUE(o.key_open_at_failure);
  EXPECT_FALSE(o.key_open_at_takeover);
  ASSERT_TRUE(o.key_reopened_after);
  EXPECT_LE(*o.key_reopened_after, s.fleet->sync_interval + s.fleet->store_latency);
  EXPECT_TRUE(o.key_open_settled);
  EXPECT_EQ(o.not_closed_at_failure, 200u);
  EXPECT_EQ(o.not_closed_at_takeover, 200u);
  EXPECT_EQ(o.not_closed_settled, 200u);
  EXPECT_GT(o.unanswered, 0u);
  EXPECT_GT(o.lost_ops, 0u);

  // Per node: every exchange asks every node, each group once; only the failed node
  // missed calls; the nodes' counts sum to the store's.
  ASSERT_EQ(c.shared.nodes.size(), 3u);
  std::uint32_t groups = 0;
  std::uint64_t unanswered = 0, lost = 0;
  for (const FleetNodeLoad& n : c.shared.nodes) {
    groups += n.groups;
    unanswered += n.unanswered;
    lost += n.lost_ops;
    EXPECT_EQ(n.exchanges, c.shared.nodes[0].exchanges);
    EXPECT_EQ(n.calls + n.unanswered, n.exchanges * n.groups) << "node " << n.node;
    // Each group call is the script or the cheap read.
    EXPECT_EQ(n.scripts + n.reads + n.unanswered, n.exchanges * n.groups) << "node " << n.node;
    EXPECT_LE(n.read_exchanges, n.exchanges) << "node " << n.node;
    if (!n.holds_key) {
      EXPECT_EQ(n.ops + n.unanswered + n.lost_ops, 0u) << "node " << n.node;
      // No ops and no news in its groups, a heartbeat of 5 min: the script ran once per
      // instance and group, at first contact; every other call was the cheap read.
      EXPECT_EQ(n.scripts, 200u * n.groups) << "node " << n.node;
    }
  }
  EXPECT_EQ(groups, 16u);
  EXPECT_EQ(unanswered, o.unanswered);
  EXPECT_EQ(lost, o.lost_ops);
  EXPECT_EQ(key_node(c.shared).node, s.fleet->failover->node);
  EXPECT_EQ(c.shared.nodes[0].latency, 1ms);
  EXPECT_EQ(c.shared.nodes[2].latency, 5ms);
  EXPECT_GE(c.shared.nodes[0].exchanges, c.shared.store_exchanges);

  // The same run without the failover sends as many calls while degraded.
  Scenario quiet = s;
  quiet.fleet->failover.reset();
  const FleetSimulationResult q = simulate_fleet(quiet);
  EXPECT_LE(c.shared.total.calls_while_degraded,
            q.configurations[0].shared.total.calls_while_degraded * 102 / 100);
  EXPECT_FALSE(q.configurations[0].shared.failover);

  // Without the failover, the fleet's exchanges are mostly quiet: most of the key's
  // node's calls are reads too, and the Redis CPU estimate is the measured unit costs
  // times the counts.
  const FleetNodeLoad& quiet_key = key_node(q.configurations[0].shared);
  EXPECT_GE(quiet_key.reads, quiet_key.calls * 9 / 10);
  for (const FleetNodeLoad& n : q.configurations[0].shared.nodes) {
    const double seconds = std::chrono::duration<double>(s.duration).count();
    EXPECT_NEAR(
        n.cpu,
        (static_cast<double>(n.scripts) * 100e-6 + static_cast<double>(n.read_exchanges) * 80e-6) /
            seconds,
        1e-9)
        << "node " << n.node;
    EXPECT_GT(n.reads_per_second, n.scripts_per_second) << "node " << n.node;
  }
  // The failed node's replica is a new connection with new incarnations: every instance
  // runs the script for each of its groups at first contact after the takeover, then
  // publishes its open again, which the others read by the script. That burst is on top
  // of what the node's scripts were without the failover, though it answered fewer calls.
  const FleetNodeLoad& failed = key_node(c.shared);
  EXPECT_LT(failed.calls, quiet_key.calls);
  EXPECT_GE(failed.scripts, quiet_key.scripts + 200u * failed.groups);

  // Deterministic, per node and failover included.
  EXPECT_EQ(fleet_to_json(r), fleet_to_json(simulate_fleet(s)));
  const auto j = nlohmann::json::parse(fleet_to_json(r));
  EXPECT_EQ(j["fleet"]["nodes"], 3);
  EXPECT_EQ(j["configurations"][0]["runs"][2]["nodes"].size(), 3u);
  EXPECT_EQ(j["configurations"][0]["runs"][2]["failover"]["not_closed_settled"], 200);
  const auto& node1 = j["configurations"][0]["runs"][2]["nodes"][1];
  EXPECT_EQ(node1["scripts"], c.shared.nodes[1].scripts);
  EXPECT_EQ(node1["reads"], c.shared.nodes[1].reads);
  EXPECT_EQ(node1["calls"], c.shared.nodes[1].calls);
  EXPECT_GT(node1["reads_per_second"].get<double>(), 0.0);
  EXPECT_GT(node1["redis_cpu_cores"].get<double>(), 0.0);
}

// When the replica takes over empty just after the fleet's open period ended (its lease
// asked for and held), the instances publish the probe's new open into the new store,
// which numbers it 1 as the old store numbered the first open: the lease must still be
// asked for it, or every instance probes on its own at its end.
TEST(FleetSharded, AReplicaTakingOverEmptyAfterTheLeaseCostsNoCalls) {
  Scenario s = sharded_fleet();
  s.fleet->failover->at = 62s;
  const FleetSimulationResult r = simulate_fleet(s);
  s.fleet->failover.reset();
  const FleetSimulationResult q = simulate_fleet(s);
  const std::uint64_t with = r.configurations[0].shared.total.calls_while_degraded;
  const std::uint64_t without = q.configurations[0].shared.total.calls_while_degraded;
  EXPECT_LE(with, without * 102 / 100) << "with the failover " << with << ", without " << without;
  EXPECT_GE(r.configurations[0].goals.isolated_over_shared, 5.0);
}

TEST(FleetSharded, AReplicaWithTheDataKeepsTheKeyOpen) {
  Scenario s = sharded_fleet();
  s.fleet->failover->replica_kept = true;
  const FleetSimulationResult r = simulate_fleet(s);
  const FleetFailoverOutcome& o = *r.configurations[0].shared.failover;
  EXPECT_TRUE(o.key_open_at_takeover);
  EXPECT_EQ(o.key_reopened_after, Nanos::zero());
  EXPECT_EQ(o.not_closed_settled, 200u);
}

// A quiet group's script runs at first contact and then once per heartbeat
// (RedisClusterStore's default: 5 min for the default idle_ttl); every other call to it
// is the cheap read.
TEST(FleetSharded, AQuietGroupRunsTheScriptOncePerHeartbeat) {
  Scenario s = short_fleet();
  s.duration = 6min;  // past one heartbeat, short of two
  s.fleet->nodes = 3;
  s.fleet->groups = 16;
  const FleetSimulationResult r = simulate_fleet(s);
  std::uint32_t checked = 0;
  for (const FleetNodeLoad& n : r.configurations[0].shared.nodes) {
    EXPECT_EQ(n.scripts + n.reads, n.exchanges * n.groups) << "node " << n.node;
    if (n.holds_key) continue;
    EXPECT_EQ(n.ops, 0u) << "node " << n.node;
    EXPECT_EQ(n.scripts, 40u * n.groups * 2) << "node " << n.node;
    ++checked;
  }
  EXPECT_EQ(checked, 2u);
}

TEST(FleetSharded, OneNodeOneGroupIsTheSingleStore) {
  // The defaults: the output has no trace of nodes, and a failover of the only node is
  // an outage followed by a restart.
  Scenario s = short_fleet();
  const std::string plain = fleet_to_json(simulate_fleet(s));
  EXPECT_EQ(plain.find("\"nodes\""), std::string::npos);
  s.fleet->failover = StoreFailover{.node = 0, .at = 40s, .down = 2s};
  const FleetSimulationResult r = simulate_fleet(s);
  EXPECT_GT(r.configurations[0].shared.sync_errors, 0u);
  EXPECT_EQ(r.configurations[0].shared.failover->not_closed_settled, 40u);
}

TEST(Fleet, FleetWindowsCostStoreOpsAndChangeNothingWhenTheFirstTripIsShared) {
  // Quorum 1: the first instance's own trip is shared before the fleet's summed window
  // would trip, so fleet windows add the instances' window levels to the exchanges and
  // leave the calls as they were.
  Scenario s = short_fleet();
  const FleetSimulationResult plain = simulate_fleet(s);
  s.fleet->fleet_window = true;
  const FleetSimulationResult window = simulate_fleet(s);
  const auto& p = plain.configurations[0].shared;
  const auto& w = window.configurations[0].shared;
  EXPECT_EQ(w.total.calls_while_degraded, p.total.calls_while_degraded);
  EXPECT_GT(w.store_ops, 10 * p.store_ops);
}

TEST(Fleet, FleetWindowsTripAFleetTooThinForAnyInstancesWindow) {
  // 40 instances at 10 pages/s: 100 calls in each one's 10 s window, under a
  // minimum_calls of 200, so no breaker ever opens alone; the fleet's summed window
  // (4,000 calls) trips them all.
  Scenario s = short_fleet();
  s.configurations[0].breaker->as<TimeWindowConfig>().minimum_calls = 200;
  const FleetSimulationResult plain = simulate_fleet(s);
  s.fleet->fleet_window = true;
  const FleetSimulationResult window = simulate_fleet(s);
  const FleetConfigurationResult& p = plain.configurations[0];
  const FleetConfigurationResult& w = window.configurations[0];
  EXPECT_EQ(p.isolated.never_opened, 40u);
  EXPECT_EQ(p.shared.never_opened, 40u);
  EXPECT_EQ(p.shared.total.calls_while_degraded, p.isolated.total.calls_while_degraded);
  EXPECT_EQ(w.shared.never_opened, 0u);
  ASSERT_TRUE(w.goals.open_spread);
  EXPECT_LE(*w.goals.open_spread, w.goals.open_spread_limit);
  EXPECT_GE(w.goals.isolated_over_shared, 5.0);
}

TEST(Fleet, ReportsHoldTheRuns) {
  const FleetSimulationResult r = simulate_fleet(short_fleet());
  std::ostringstream text;
  write_fleet_text(text, r);
  for (const char* row : {"single", "isolated", "shared", "goal:"}) {
    EXPECT_NE(text.str().find(row), std::string::npos) << row;
  }
  const auto j = nlohmann::json::parse(fleet_to_json(r));
  ASSERT_EQ(j["configurations"].size(), 1u);
  const auto& runs = j["configurations"][0]["runs"];
  ASSERT_EQ(runs.size(), 3u);
  for (const auto& run : runs) {
    const FleetRun& expected = run_named(r.configurations[0], run["name"].get<std::string>());
    EXPECT_EQ(run["calls_while_degraded"].get<std::uint64_t>(),
              expected.total.calls_while_degraded);
    EXPECT_EQ(run["time_to_open_ms"].size(), expected.instances);
  }
  const std::string svg = fleet_to_svg(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

#else

TEST(Fleet, WithoutRedisAFleetRunIsAClearError) {
  EXPECT_FALSE(fleet_supported());
  try {
    simulate_fleet(short_fleet());
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("configure with -DBULWARK_REDIS=ON"), std::string::npos);
  }
}

#endif

// ---- [fleet] in TOML ----------------------------------------------------------------

std::string with_fleet(const std::string& fleet) {
  std::string toml(builtin_fleet_scenario_toml());
  toml.resize(toml.rfind("\n[fleet]") + 1);
  return toml + "[fleet]\n" + fleet;
}

TEST(FleetToml, ReadsEveryKey) {
  const Scenario s = parse_scenario(with_fleet("instances = 7\n"
                                               "sync_interval = \"250ms\"\n"
                                               "store_latency = \"3ms\"\n"
                                               "quorum = 2\n"
                                               "quorum_window = \"5s\"\n"
                                               "lease_duration = \"8s\"\n"
                                               "sync_on_open = true\n"
                                               "fleet_window = true\n"
                                               "outages = [{ start = \"1min\", end = \"2min\" }]\n"
                                               "configurations = [\"after\"]\n"),
                                    "f.toml");
  ASSERT_TRUE(s.fleet);
  EXPECT_EQ(s.fleet->instances, 7u);
  EXPECT_EQ(s.fleet->sync_interval, 250ms);
  EXPECT_EQ(s.fleet->store_latency, 3ms);
  EXPECT_EQ(s.fleet->quorum, 2u);
  EXPECT_EQ(s.fleet->quorum_window, 5s);
  EXPECT_EQ(s.fleet->lease_duration, 8s);
  EXPECT_TRUE(s.fleet->sync_on_open);
  EXPECT_TRUE(s.fleet->fleet_window);
  ASSERT_EQ(s.fleet->outages.size(), 1u);
  EXPECT_EQ(s.fleet->outages[0].start, 1min);
  EXPECT_EQ(s.fleet->outages[0].end, 2min);
  EXPECT_EQ(s.fleet->configurations, std::vector<std::string>{"after"});
}

TEST(FleetToml, ReadsTheShardedStoreKeys) {
  const Scenario s = parse_scenario(
      with_fleet("instances = 7\n"
                 "nodes = 3\n"
                 "groups = 8\n"
                 "store_latency = [\"1ms\", \"4ms\", \"2ms\"]\n"
                 "failover = { node = 2, at = \"2min\", down = \"10s\", replica = \"kept\" }\n"),
      "f.toml");
  ASSERT_TRUE(s.fleet);
  EXPECT_EQ(s.fleet->nodes, 3u);
  EXPECT_EQ(s.fleet->groups, 8u);
  EXPECT_EQ(s.fleet->node_latency, (std::vector<Nanos>{1ms, 4ms, 2ms}));
  EXPECT_EQ(s.fleet->store_latency, 4ms);  // an exchange waits for the slowest node
  ASSERT_TRUE(s.fleet->failover);
  EXPECT_EQ(s.fleet->failover->node, 2u);
  EXPECT_EQ(s.fleet->failover->at, 2min);
  EXPECT_EQ(s.fleet->failover->down, 10s);
  EXPECT_TRUE(s.fleet->failover->replica_kept);
  const Scenario d = parse_scenario(with_fleet("instances = 7\nnodes = 2\n"
                                               "failover = { at = \"1min\" }\n"),
                                    "f.toml");
  EXPECT_EQ(d.fleet->groups, 2u);  // one per node
  EXPECT_EQ(d.fleet->failover->node, 0u);
  EXPECT_EQ(d.fleet->failover->down, 5s);
  EXPECT_FALSE(d.fleet->failover->replica_kept);  // the worst case: lost
}

TEST(FleetToml, DefaultsToEveryConfigurationWithABreaker) {
  const Scenario s = parse_scenario(with_fleet("instances = 3\n"), "f.toml");
  ASSERT_TRUE(s.fleet);
  EXPECT_EQ(s.fleet->configurations, std::vector<std::string>{"after"});
  EXPECT_EQ(s.fleet->sync_interval, 200ms);
  EXPECT_EQ(s.fleet->quorum, 1u);
  EXPECT_FALSE(s.fleet->sync_on_open);
  EXPECT_FALSE(s.fleet->fleet_window);
  EXPECT_FALSE(builtin_scenario().fleet);
}

struct Bad {
  const char* fleet;
  const char* field;
  const char* message;
};

class FleetBadValue : public ::testing::TestWithParam<Bad> {};

TEST_P(FleetBadValue, NamesTheField) {
  const Bad b = GetParam();
  try {
    parse_scenario(with_fleet(b.fleet), "f.toml");
    FAIL() << "expected an InputError for " << b.fleet;
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), b.field) << e.what();
    EXPECT_NE(e.message().find(b.message), std::string::npos) << e.what();
    EXPECT_EQ(e.where().file, "f.toml");
    EXPECT_GT(e.where().line, 0u) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Values, FleetBadValue,
    ::testing::Values(
        Bad{"sync_interval = \"200ms\"\n", "fleet", "missing required key \"instances\""},
        Bad{"instances = 0\n", "fleet.instances", "at least 1"},
        Bad{"instances = 10001\n", "fleet.instances", "at most 10000"},
        Bad{"instances = \"100\"\n", "fleet.instances", "whole number"},
        Bad{"instances = 10\nquorum = 11\n", "fleet.quorum", "1..instances"},
        Bad{"instances = 10\nquorum = 0\n", "fleet.quorum", "1..instances"},
        Bad{"instances = 10\nsync_interval = \"0ms\"\n", "fleet.sync_interval", "at least 1ms"},
        Bad{"instances = 10\nsync_interval = \"1500us\"\n", "fleet.sync_interval",
            "whole number of milliseconds"},
        Bad{"instances = 10\nsync_interval = \"2min\"\n", "fleet.sync_interval", "at most"},
        Bad{"instances = 10\nstore_latency = \"200ms\"\n", "fleet.store_latency",
            "shorter than sync_interval"},
        Bad{"instances = 10\nlease_duration = 5\n", "fleet.lease_duration", "no unit"},
        Bad{"instances = 10\nsync_on_open = 1\n", "fleet.sync_on_open", "true or false"},
        Bad{"instances = 10\noutages = [{ start = \"2min\", end = \"1min\" }]\n",
            "fleet.outages[0].end", "must be after start"},
        Bad{"instances = 10\noutages = [{ start = \"20min\", end = \"21min\" }]\n",
            "fleet.outages[0].start", "not before the scenario's end"},
        Bad{"instances = 10\noutages = [{ start = \"1min\" }]\n", "fleet.outages[0]",
            "missing required key \"end\""},
        Bad{"instances = 10\noutages = [\"1min\"]\n", "fleet.outages[0]", "expected a table"},
        Bad{"instances = 10\noutages = [{ start = \"1min\", end = \"2min\", x = 1 }]\n",
            "fleet.outages[0].x", "unknown key"},
        Bad{"instances = 10\nconfigurations = [\"before\"]\n", "fleet.configurations[0]",
            "no configuration named \"before\""},
        Bad{"instances = 10\nconfigurations = []\n", "fleet.configurations", "names no"},
        Bad{"instances = 10\nconfigurations = [\"after\", \"after\"]\n", "fleet.configurations[1]",
            "twice"},
        Bad{"instances = 10\nsync_intervall = \"1s\"\n", "fleet.sync_intervall",
            "did you mean \"sync_interval\""},
        Bad{"instances = 10\nnodes = 0\n", "fleet.nodes", "at least 1"},
        Bad{"instances = 10\nnodes = 101\n", "fleet.nodes", "at most 100"},
        Bad{"instances = 10\nnodes = 3\ngroups = 2\n", "fleet.groups", "at least nodes"},
        Bad{"instances = 10\nnodes = 2\nstore_latency = [\"1ms\"]\n", "fleet.store_latency",
            "one latency per node"},
        Bad{"instances = 10\nnodes = 2\nstore_latency = [\"1ms\", 2]\n", "fleet.store_latency[1]",
            "expected a duration string"},
        Bad{"instances = 10\nnodes = 2\nstore_latency = [\"1ms\", \"300ms\"]\n",
            "fleet.store_latency", "shorter than sync_interval"},
        Bad{"instances = 10\nnodes = 2\nfailover = { node = 2, at = \"1min\" }\n",
            "fleet.failover.node", "0..nodes-1"},
        Bad{"instances = 10\nfailover = { node = 0 }\n", "fleet.failover",
            "missing required key \"at\""},
        Bad{"instances = 10\nfailover = { at = \"20min\" }\n", "fleet.failover.at",
            "not before the scenario's end"},
        Bad{"instances = 10\nfailover = { at = \"1min\", down = \"0s\" }\n", "fleet.failover.down",
            "longer than 0s"},
        Bad{"instances = 10\nfailover = { at = \"1min\", replica = \"gone\" }\n",
            "fleet.failover.replica", "\"lost\", \"kept\""},
        Bad{"instances = 10000\nsync_interval = \"1ms\"\n", "fleet.sync_interval",
            "6e9 fleet syncs (10000 instances, each every 1ms)"}));

TEST(FleetToml, AConfigurationWithoutABreakerCannotRunAsAFleet) {
  std::string toml(builtin_fleet_scenario_toml());
  toml.resize(toml.rfind("\n[fleet]") + 1);
  toml +=
      "[config.plain]\ntimeout = \"1s\"\n\n[fleet]\ninstances = 2\nconfigurations = "
      "[\"plain\"]\n";
  try {
    parse_scenario(toml, "f.toml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "fleet.configurations[0]");
    EXPECT_NE(e.message().find("has no breaker"), std::string::npos) << e.what();
  }
}

TEST(Fleet, AScenarioWithoutAFleetIsRefused) {
  try {
    simulate_fleet(builtin_scenario());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "fleet");
  }
}

// A fleet at the old sync cap (10,000 instances syncing every millisecond for 10 s:
// 1e8 syncs) ran for five minutes: refused when read, naming sync_interval.
TEST(FleetToml, AFleetSyncingTooOftenIsRefusedWithItsEstimate) {
  std::string toml(builtin_fleet_scenario_toml());
  const auto set = [&](const std::string& from, const std::string& to) {
    const std::size_t at = toml.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    toml.replace(at, from.size(), to);
  };
  set("instances = 100\n", "instances = 10000\n");
  set("sync_interval = \"200ms\"", "sync_interval = \"1ms\"");
  set("store_latency = \"1ms\"", "store_latency = \"0ms\"");
  set("duration = \"10min\"", "duration = \"10s\"");
  set("start = \"1min\"", "start = \"2s\"");
  set("start = \"7min\"", "start = \"8s\"");
  try {
    (void)parse_scenario(toml, "f.toml");
    ADD_FAILURE() << "refused";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "fleet.sync_interval") << e.what();
    EXPECT_GT(e.where().line, 0u);
    EXPECT_NE(e.message().find("would take about 4 minutes"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("1e8 fleet syncs"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("or use fewer instances or a longer sync_interval"),
              std::string::npos)
        << e.what();
  }
  // A tenth of it runs.
  set("duration = \"10s\"", "duration = \"1s\"");
  set("start = \"2s\"", "start = \"200ms\"");
  set("start = \"8s\"", "start = \"800ms\"");
  const Scenario s = parse_scenario(toml, "f.toml");
  EXPECT_LE(estimate_work(s, true).seconds, kMaxRunSeconds);
}

// docs/lab.md's "What moves the goals" runs the built-in fleet with one `sed` each: every
// one of them, and all of them at once, is within the run bound.
TEST(FleetToml, TheDocumentedVariantsAreWithinTheRunBound) {
  std::ifstream in(std::string(BULWARK_SOURCE_DIR) + "/docs/lab.md");
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  std::string all(builtin_fleet_scenario_toml());
  int variants = 0;
  // Every `s/^FROM/TO/`.
  for (std::size_t at_sed = text.find("`s/^"); at_sed != std::string::npos;
       at_sed = text.find("`s/^", at_sed + 1)) {
    const std::size_t mid = text.find('/', at_sed + 4);
    const std::size_t last = text.find("/`", mid + 1);
    ASSERT_TRUE(mid != std::string::npos && last != std::string::npos);
    const std::string from = text.substr(at_sed + 4, mid - at_sed - 4);
    const std::string to = text.substr(mid + 1, last - mid - 1);
    std::string one(builtin_fleet_scenario_toml());
    const std::size_t at = one.find("\n" + from);
    ASSERT_NE(at, std::string::npos) << "docs/lab.md's sed finds nothing: " << from;
    one.replace(at + 1, from.size(), to);
    const Scenario s = parse_scenario(one, "v.toml");
    EXPECT_LE(estimate_work(s, true).seconds, kMaxRunSeconds) << to;
    const std::size_t at_all = all.find("\n" + from);
    if (at_all != std::string::npos) all.replace(at_all + 1, from.size(), to);
    ++variants;
  }
  EXPECT_GE(variants, 8) << "the table of variants in docs/lab.md";
  const Scenario s = parse_scenario(all, "all.toml");
  EXPECT_LE(estimate_work(s, true).seconds, kMaxRunSeconds);
}

}  // namespace
}  // namespace bulwark::lab

// ---- the CLI ------------------------------------------------------------------------

namespace bulwark::testing {
namespace {

#if defined(BULWARK_LAB_FLEET)

TEST(FleetCli, RunsTheBuiltInFleetScenario) {
  const CliRun r = run({"simulate", "--fleet", "--duration", "2min"});
  EXPECT_EQ(r.status, 0) << r.err;
  for (const char* s : {"single", "isolated", "shared", "goal: sharing sends"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
}

TEST(FleetCli, WritesJson) {
  const CliRun r = run({"simulate", "--fleet", "--duration", "2min", "--json", "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["fleet"]["instances"], 100);
  EXPECT_EQ(j["configurations"][0]["runs"].size(), 3u);
}

#else

TEST(FleetCli, WithoutRedisSaysHowToGetIt) {
  const CliRun r = run({"simulate", "--fleet"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("configure with -DBULWARK_REDIS=ON"), std::string::npos) << r.err;
}

#endif

TEST(FleetCli, PrintsTheFleetScenario) {
  const CliRun r = run({"simulate", "--fleet", "--print-scenario"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("[fleet]"), std::string::npos);
}

TEST(FleetCli, FleetNeedsAFleetTable) {
  const CliRun r = run({"simulate", "--fleet", source_path("tools/examples/incident.toml")});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("no [fleet] table"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(FleetCli, DurationIsHeldToTheFleetsBounds) {
  // 100 instances syncing every 200 ms for 60 hours: over a hundred million syncs.
  const CliRun r = run({"simulate", "--fleet", "--duration", "60h"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--duration: this scenario would take about "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1.1e8 fleet syncs (100 instances, each every 200ms)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(FleetCli, TimelineOptionsDoNotApply) {
  const CliRun r = run({"simulate", "--fleet", "--timeline-step", "10s"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--timeline-step"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace bulwark::testing
