// bulwark/lab/fleet.h — a scenario's traffic through a fleet of instances, isolated or
// sharing their breakers' decisions, in one virtual time.
//
// A scenario with a [fleet] table (config.h: FleetSpec) runs each of its fleet
// configurations three ways, on the same arrivals:
//   single    one instance taking all the traffic (simulate_configuration()): the
//             limit that sharing can reach
//   isolated  `instances` instances, each with its own breaker, bulkhead and workers
//             and rate / instances of the arrivals (its own arrival stream, seeded
//             from the scenario's seed and its index); nothing shared
//   shared    the same instances, each with a bulwark::redis::Fleet over one
//             MemoryFleetStore: the code that runs over Redis, with the store's
//             round trip and outages modelled in virtual time. Each instance syncs
//             every sync_interval, at its own phase (index / instances of the
//             interval), and the exchange takes effect store_latency after the tick.
//             With nodes / groups, the store is sharded as RedisClusterStore shards
//             it (one MemoryFleetStore per group, groups round-robin on nodes, the
//             cluster store's merge), an exchange waits for the slowest node, and a
//             failover takes one node down then hands its groups to a replica.
// Every Fleet and the store read the virtual clock (FleetConfig::wall_ms, the store's
// lease clock), so a run is deterministic: the same scenario gives the same result.
//
//   bulwark::lab::FleetSimulationResult r =
//       bulwark::lab::simulate_fleet(bulwark::lab::builtin_fleet_scenario());
//   bulwark::lab::write_fleet_text(std::cout, r);
//
// The fleet needs bulwark::redis: a build without it (-DBULWARK_REDIS=OFF) has
// fleet_supported() false and simulate_fleet() throws InputError saying so.
//
// Cost: the scenario's events three times over (single, isolated, shared), with a
// heap of two entries per instance, plus for shared one exchange per instance per sync
// interval (a few map operations and allocations each; a sharded store asks each of its
// groups, a quiet one for a few comparisons: 10,000 instances, 16 groups, 2 min of
// virtual time take about 40 s, tools/examples/fleet_10k.toml). Memory: per instance its
// requests in flight and some tens of kilobytes (10,000 instances: about 300 MB). Not
// thread-safe; each call builds and owns its objects.

#ifndef BULWARK_LAB_FLEET_H_
#define BULWARK_LAB_FLEET_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/simulate.h"

namespace bulwark::lab {

// Redis CPU per call, measured (docs/performance.md, "Quiet groups: the cheap read
// instead of the script"): a script call's fixed part (~0.1 ms; its per-key work, ~0.19
// ms per sync of 1,000 keys split over the groups, is left out), and one sync's cheap
// reads on a node (~0.08 ms whatever the number of its groups: one pipelined round).
inline constexpr Nanos kScriptCost = std::chrono::microseconds(100);
inline constexpr Nanos kReadCost = std::chrono::microseconds(80);

// What one node of the store carried in a shared run (FleetSpec::nodes; groups placed
// round-robin). exchanges: instance exchanges that asked it (each asks every node);
// calls: its groups' calls answered (one per group per exchange), each either a script
// call (scripts) or a cheap read (reads), as RedisClusterStore decides (docs/fleet.md,
// "One sync"): scripts + reads + unanswered = exchanges x groups; read_exchanges: the
// exchanges that sent it at least one read; ops: the ops delivered to its groups;
// unanswered and lost_ops: the calls and ops it missed while down (the ops are sent
// again). Rates are per second of the scenario. cpu: the Redis CPU those calls cost,
// estimated as scripts x kScriptCost + read_exchanges x kReadCost, in cores (1: one
// core busy for the whole scenario).
struct FleetNodeLoad {
  std::uint32_t node = 0;
  std::uint32_t groups = 0;
  Nanos latency{};
  bool holds_key = false;  // the dependency's key is in one of its groups
  std::uint64_t exchanges = 0, calls = 0, scripts = 0, reads = 0, read_exchanges = 0, ops = 0,
                unanswered = 0, lost_ops = 0;
  double exchanges_per_second = 0, calls_per_second = 0, scripts_per_second = 0,
         reads_per_second = 0, ops_per_second = 0, cpu = 0;
};

// A shared run's failover (FleetSpec::failover): the node's groups answer nothing from
// `at` for `down`, then its replica takes over. The dependency's key and the
// instances' breakers are looked at when the node fails, when the replica takes over,
// and one sync interval plus the round trip after that (`settled`).
struct FleetFailoverOutcome {
  bool key_on_node = false;           // the key's group is on the failed node
  bool key_open_at_failure = false;   // the store held the key open when the node failed
  bool key_open_at_takeover = false;  // ... when the replica took over (lost: never)
  bool key_open_settled = false;
  // After the takeover, how long until the store held the key open again (0: it did).
  std::optional<Nanos> key_reopened_after;
  // Instances whose breaker was not CLOSED (open or half-open), at each look.
  std::uint32_t not_closed_at_failure = 0, not_closed_at_takeover = 0, not_closed_settled = 0;
  std::uint64_t unanswered = 0, lost_ops = 0;  // the node's, while down
};

// One way of running a configuration: single, isolated or shared.
struct FleetRun {
  std::string name;
  std::uint32_t instances = 0;
  // Counts summed over the instances (requests, lost, served_*, failed, calls,
  // calls_while_degraded, retries, reasons, opens). Latencies, peaks and the timeline
  // are left empty.
  ConfigurationResult total;
  // Per instance, in index order: the time from the degradation to its breaker's first
  // opening after it (none: it never opened).
  std::vector<std::optional<Nanos>> time_to_open;
  std::optional<Nanos> first_open;   // over the instances that opened
  std::optional<Nanos> median_open;  // the median of every instance's (never = last)
  std::optional<Nanos> last_open;    // none if any instance never opened
  std::uint32_t never_opened = 0;
  // shared: the exchanges with the store (one per sync), the ops they carried, and
  // the exchanges that failed (the store was down).
  std::uint64_t store_exchanges = 0;
  std::uint64_t store_ops = 0;
  std::uint64_t sync_errors = 0;
  double store_exchanges_per_second = 0;
  double store_ops_per_second = 0;
  // shared: per node of the store, and the failover's effect if the scenario has one.
  std::vector<FleetNodeLoad> nodes;
  std::optional<FleetFailoverOutcome> failover;
};

// The requirement's goals, from calls to the dependency while it was degraded.
struct FleetGoals {
  double isolated_over_shared = 0;   // goal: >= 5
  double shared_over_single = 0;     // goal: <= 1.5
  std::optional<Nanos> open_spread;  // shared: last_open - first_open
  Nanos open_spread_limit{};         // one sync interval plus the store's round trip
  bool fewer_than_isolated = false;
  bool near_single = false;
  bool open_together = false;
  bool all() const { return fewer_than_isolated && near_single && open_together; }
};

struct FleetConfigurationResult {
  std::string configuration;
  FleetRun single, isolated, shared;
  FleetGoals goals;
};

struct FleetSimulationResult {
  Scenario scenario;  // with its fleet
  std::vector<FleetConfigurationResult> configurations;
};

// True when this build has bulwark::redis (the fleet's store seam).
bool fleet_supported() noexcept;

// Runs the scenario's fleet configurations. Throws InputError when the scenario has no
// [fleet] table, when this build has no fleet support, and for what simulate() rejects.
FleetSimulationResult simulate_fleet(const Scenario& scenario);

// The built-in fleet scenario (tools/examples/fleet.toml, compiled in): the
// hotel-reviews incident over 100 instances.
std::string_view builtin_fleet_scenario_toml();
Scenario builtin_fleet_scenario();

// Reports: a table (rows single, isolated, shared) and a line per goal; the same
// numbers as JSON (durations in milliseconds); an SVG with each run's times to open as
// a cumulative curve over the instances and its calls while degraded as bars. Each
// costs time linear in the instances.
void write_fleet_text(std::ostream& out, const FleetSimulationResult& result);
std::string fleet_to_json(const FleetSimulationResult& result);
std::string fleet_to_svg(const FleetSimulationResult& result);

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_FLEET_H_
