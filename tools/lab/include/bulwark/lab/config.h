// bulwark/lab/config.h — resilience configurations and simulation scenarios, from TOML.
//
// Every option of the breaker, retry, retry budget, bulkhead and fallback can be set
// in TOML under the library's own field path: nested fields as dotted keys or tables
// (docs/configuration.md is the reference):
//
//   [breaker]                        # what `bulwark replay --config` reads
//   kind = "time"                    # consecutive | count | time: picks the breaker type
//   failure_rate = 0.30
//   slow_call_rate = 0.30
//   slow_call_duration = "400ms"
//   minimum_calls = 20
//   window.length = "10s"
//   open_duration = "30s"
//   half_open.fraction = 0.10
//
//   bulwark::lab::BreakerSpec spec = bulwark::lab::load_breaker_file("breaker.toml");
//
// A scenario (`bulwark simulate`) adds the traffic, the caller, the dependency's phases
// and one [config.NAME] table per resilience configuration to compare.
//
// Loading checks everything before anything runs: TOML syntax, unknown keys (with a
// suggestion for a misspelt one), types, units, ranges, and then the library's own
// validate() for each component, whose error is mapped back to the TOML key and line.
// Every failure is an InputError naming file, line and key. Loading costs a parse of
// the file; nothing is kept of the TOML document afterwards.
//
// A breaker table's keys are the fields of the breaker type's own configuration
// (BreakerConfig, CountWindowConfig or TimeWindowConfig, picked by `kind`). A key the
// chosen breaker type does not have is an error naming the key. The flat names of
// earlier releases (window_length, half_open_successes, window = "count", ...) are
// still read for one release, each with a warning naming its new key.
//
// Options that are functions in the library (HalfOpen::random,
// RetryConfig::random, RetryConfig::idempotency_key, Backoff::custom) cannot be
// written in TOML; the random sources are replaced by seeded generators (random_seed).

#ifndef BULWARK_LAB_CONFIG_H_
#define BULWARK_LAB_CONFIG_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "bulwark/adaptive_limit.h"
#include "bulwark/breaker_config.h"
#include "bulwark/bulkhead.h"
#include "bulwark/clock.h"
#include "bulwark/fallback.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/load_shedder.h"
#include "bulwark/pipeline.h"
#include "bulwark/retry.h"
#include "bulwark/retry_budget.h"
#include "bulwark/throttle.h"

namespace bulwark::lab {

// Bucket capacity of the lab's time-window breaker: window_buckets may go up to this.
inline constexpr std::uint32_t kTimeWindowCapacity = 120;

// The lab's bounds on what a file may ask for, checked when it is read (the error names
// the key and the bound; docs/configuration.md lists them all). They keep every run
// finite: no file makes the lab crash, hang or take memory without bound.
inline constexpr std::size_t kMaxTomlBytes = 1 << 20;  // a configuration or scenario file
inline constexpr std::uint32_t kMaxTomlNesting = 32;   // tables, arrays and inline tables
inline constexpr std::size_t kMaxNameBytes = 128;      // every `name` (and config.NAME)
inline constexpr std::size_t kMaxDescriptionBytes = 1024;
// Every duration, unless its key has a lower bound of its own.
inline constexpr Nanos kMaxConfigDuration = std::chrono::hours(24 * 365);
// Latencies, timeouts and the caller's work: the simulator's longest call.
inline constexpr Nanos kMaxCallDuration = std::chrono::hours(24);
inline constexpr Nanos kMaxScenarioDuration = std::chrono::hours(24 * 30);
inline constexpr std::uint32_t kMaxAttempts = 100;  // retry.max_attempts
inline constexpr double kMaxMultiplier = 1000;      // open_duration_multiplier, backoff
inline constexpr std::uint32_t kMaxMinimumCalls = 1'000'000;
inline constexpr std::uint32_t kMaxConcurrent = 1'000'000;     // bulkhead.max_concurrent
inline constexpr std::uint32_t kMaxWorkers = 1'000'000;        // caller.workers
inline constexpr std::uint32_t kMaxServerWorkers = 1'000'000;  // dependency.server.workers
inline constexpr std::uint32_t kMaxServerQueue = 1'000'000;    // dependency.server.queue
inline constexpr double kMaxRate = 1e6;                        // arrivals.rate, per second
inline constexpr std::size_t kMaxPhases = 1000;
inline constexpr std::size_t kMaxConfigurations = 16;
inline constexpr std::uint32_t kMaxInstances = 10000;   // fleet.instances
inline constexpr std::size_t kMaxOutages = 1000;        // fleet.outages
inline constexpr std::uint32_t kMaxStoreNodes = 100;    // fleet.nodes
inline constexpr std::uint32_t kMaxStoreGroups = 1000;  // fleet.groups

// A breaker configuration of one of the three breaker types; the alternative held
// says which (window()).
struct BreakerSpec {
  std::variant<BreakerConfig, CountWindowConfig, TimeWindowConfig> config;

  BreakerSpec() = default;
  BreakerSpec(BreakerConfig c) : config(std::move(c)) {}      // NOLINT: implicit
  BreakerSpec(CountWindowConfig c) : config(std::move(c)) {}  // NOLINT: implicit
  BreakerSpec(TimeWindowConfig c) : config(std::move(c)) {}   // NOLINT: implicit

  WindowKind window() const noexcept { return static_cast<WindowKind>(config.index()); }
  // The configuration as the given type; throws std::bad_variant_access if it is not.
  template <class Config>
  const Config& as() const {
    return std::get<Config>(config);
  }
  template <class Config>
  Config& as() {
    return std::get<Config>(config);
  }
  const std::string& name() const;
  Nanos slow_call_duration() const;  // zero without a window
};

// A retry policy; `config.random` is a SplitMix64 seeded with `random_seed`.
struct RetrySpec {
  RetryConfig config;
  std::uint64_t random_seed = 0;
};

// One named way of calling the dependency: the pipeline's stages, each optional.
// What a configuration is expected to do once the trigger (the degraded phases) is
// over, with a server dependency: be back to full goodput within `recover_within`, or
// (to show a metastable failure) still be overloaded at the scenario's end; and where
// its adaptive limit settles.
struct LoadGoal {
  std::optional<Nanos> recover_within{};
  bool overloaded_to_end = false;
  // With an adaptive limit: where it should settle before any trigger (±30 %).
  std::optional<std::uint32_t> limit_settles_near{};
};

// A server-side load shedder (load_shedder.h) in front of the dependency's server
// ([config.NAME.shedder]): what the server admits, queues and refuses (simulate.h).
// Its limit is `limit` (a FixedLimit), or an adaptive one fed by the shedder's permits
// (an AdaptiveLimitSource, with `queue_timeout_is_drop`).
struct ShedderSpec {
  LoadShedderConfig config;
  std::uint32_t limit = 64;
  std::optional<AdaptiveLimitConfig> adaptive_limit{};
  bool queue_timeout_is_drop = false;
};

struct ResilienceConfig {
  std::string name;
  std::optional<Nanos> timeout;  // per attempt; none: the call takes what it takes
  std::optional<BreakerSpec> breaker;
  BreakerScope breaker_scope = BreakerScope::call;
  std::optional<BulkheadConfig> bulkhead;
  std::optional<RetrySpec> retry;
  std::optional<RetryBudgetConfig> retry_budget;  // only with a retry
  std::optional<Reasons> fallback;                // the reasons a degraded page answers
  // Report when the breaker has been away from CLOSED this long (the "open too long" alert).
  std::optional<Nanos> alert_when_open_for;
  std::optional<LoadGoal> goal{};
  // An adaptive concurrency limit on the attempts (adaptive_limit.h): a refusal is
  // reported as bulkhead_full; a failed attempt is a drop, a successful one a round trip.
  std::optional<AdaptiveLimitConfig> adaptive_limit{};
  // Client-side adaptive throttling (throttle.h) before each attempt: a local rejection
  // is reported as `throttled`; an attempt's success counts as accepted.
  std::optional<ThrottleConfig>
      throttle{};  // [config.NAME.goal]: checked and reported after the run
  // The dependency's own protection (with a [dependency.server] only): a refusal is a
  // fast failure the caller sees (`call_error`, counted in ConfigurationResult::shed).
  std::optional<ShedderSpec> shedder{};
};

enum class ArrivalProcess : std::uint8_t { constant, poisson };

struct Arrivals {
  ArrivalProcess process = ArrivalProcess::poisson;
  double rate = 0;  // requests per second, > 0
};

// The service whose pages call the dependency. A request holds one worker from its
// arrival until its page is done; a request that finds every worker busy is lost.
struct Caller {
  std::uint32_t workers = 0;
  Nanos work = Nanos::zero();  // the page's own work, after the dependency call
};

struct Latency {
  enum class Distribution : std::uint8_t { constant, uniform, exponential, lognormal };
  Distribution distribution = Distribution::constant;
  Nanos value = Nanos::zero();   // constant
  Nanos min = Nanos::zero();     // uniform
  Nanos max = Nanos::zero();     // uniform
  Nanos mean = Nanos::zero();    // exponential
  Nanos median = Nanos::zero();  // lognormal
  double sigma = 0;              // lognormal: the log's standard deviation
};

// From `start` until the next phase starts, calls started take `latency` and fail with
// probability `error_rate` (after their latency).
struct Phase {
  std::string name;
  Nanos start = Nanos::zero();
  Latency latency;
  double error_rate = 0;
  bool degraded = false;  // counts for "time to open" and "calls while degraded"
  // With a server (Dependency::server): its workers and service time while the phase
  // runs (none: the server's own). `latency` is then the service time, for reports.
  std::optional<std::uint32_t> workers{};
  std::optional<Latency> service_time{};
  // The arrival rate while the phase runs (none: the scenario's [arrivals] rate).
  std::optional<double> arrival_rate{};
};

// A dependency with finite capacity ([dependency.server]): `workers` serve attempts
// first come first served, each for a service time drawn from `service_time`; up to
// `queue` more wait in a FIFO; an attempt that finds the queue full is refused at once
// (a failure). A caller's timeout abandons the attempt, but the server still serves it
// when its turn comes (wasted work). Latency is then queueing plus service time.
struct Server {
  std::uint32_t workers = 0;  // >= 1
  std::uint32_t queue = 0;    // 0: nothing waits
  Latency service_time;
};

struct Dependency {
  std::string name = "dependency";
  std::vector<Phase> phases;       // the first starts at 0; starts strictly increase
  std::optional<Server> server{};  // none: each attempt takes its phase's latency
};

// A window of time during which the fleet's store is down: every exchange fails.
struct StoreOutage {
  Nanos start = Nanos::zero();
  Nanos end = Nanos::zero();  // > start
};

// One node of the store fails mid-run (fleet.failover): from `at` it answers nothing for
// `down`, then its replica takes over its groups, with the master's data (kept) or,
// at worst, empty (a new incarnation of its groups: the instances re-publish their opens).
struct StoreFailover {
  std::uint32_t node = 0;  // 0..nodes-1
  Nanos at = Nanos::zero();
  Nanos down = std::chrono::seconds(5);  // > 0
  bool replica_kept = false;             // replica = "kept"; "lost" (the default): empty
};

// The scenario run as a fleet ([fleet]): `instances` instances of the caller, each with
// the configuration's own breaker, bulkhead and workers (the scenario's values, per
// instance: what deploying the same configuration everywhere gives) and 1/instances of
// the arrivals; isolated, or sharing breaker decisions through one in-process store.
struct FleetSpec {
  std::uint32_t instances = 0;                           // 1..kMaxInstances
  Nanos sync_interval = std::chrono::milliseconds(200);  // whole ms, 1ms..1min
  Nanos store_latency = std::chrono::milliseconds(1);    // an exchange's round trip
  std::uint32_t quorum = 1;                              // 1..instances
  Nanos quorum_window = std::chrono::seconds(10);        // whole ms
  Nanos lease_duration = Nanos::zero();  // whole ms; 0: derived per key (FleetConfig)
  // An instance whose breaker opens syncs at once (its timer woken by the transition)
  // instead of waiting for its next tick.
  bool sync_on_open = false;
  // The key's rate rules judged on the sum of every instance's window counts too
  // (bulwark::redis::AttachOptions::fleet_window): the fleet trips as one breaker.
  bool fleet_window = false;
  std::vector<StoreOutage> outages;  // each [start, end), inside the scenario
  // The store sharded as RedisClusterStore shards it: `groups` hash-tag groups (one
  // MemoryFleetStore each) placed round-robin on `nodes` nodes (group g on node
  // g % nodes); every exchange asks every group. 1 and 1: one store, as before.
  std::uint32_t nodes = 1;   // 1..kMaxStoreNodes
  std::uint32_t groups = 1;  // nodes..kMaxStoreGroups
  // Each node's round trip when store_latency is a list (one per node); empty: every
  // node's is store_latency. An exchange takes the slowest node's (store_latency then
  // holds that maximum).
  std::vector<Nanos> node_latency;
  std::optional<StoreFailover> failover;
  // The configurations to run as a fleet (each with a breaker); default: every one
  // with a breaker.
  std::vector<std::string> configurations;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source;  // the file it came from ("built-in" for the built-in incident)
  Nanos duration = Nanos::zero();
  std::uint64_t seed = 1;
  Arrivals arrivals;
  Caller caller;
  Dependency dependency;
  std::vector<ResilienceConfig> configurations;  // in file order
  std::optional<FleetSpec> fleet;                // a [fleet] table: run as a fleet

  // When the first degraded phase starts and the next non-degraded one starts (or the
  // end); empty if no phase is degraded.
  std::optional<Nanos> degraded_from() const;
  Nanos degraded_until() const;
};

// ---- the work a run costs ------------------------------------------------------------
//
// A run is bounded by what a person waits for at a prompt: a scenario whose estimated
// run time exceeds kMaxRunSeconds is refused, with the estimate, before anything runs.
// The estimate is the worst case, from the scenario alone (the same verdict on every
// machine): every attempt of every request failing and retried (requests = rate x
// duration, times max_attempts), each at the slowest cost per attempt measured for its
// shape, and for a fleet every instance's syncs. Costs are CPU time per unit on the
// 2-core machine the lab was measured on (docs/lab.md, "How long a run may take"):
//
//   an attempt, by caller.workers (the calls in flight)  <= 1e3: 0.3 us, <= 1e4: 0.5,
//                                                          <= 1e5: 0.75, more: 1.3
//   an attempt in a fleet run, by fleet.instances         <= 100: 0.9 us, <= 1000: 1.6,
//     (at least the above for instances x workers)        more: 3.2
//   a fleet sync (one Fleet::sync()), by fleet.instances  <= 100: 0.5 us, <= 1000: 0.7,
//                                                          more: 2.2, plus 0.25 us per
//                                                          fleet.groups beyond the first
//
// simulate() runs the configurations side by side, so a plain scenario's time is that
// of two cores sharing them (the longest configuration, or half the sum if more); a
// fleet's runs (single, isolated, shared per configuration) run one after another.
inline constexpr double kMaxRunSeconds = 60;

struct WorkEstimate {
  double requests = 0;     // per configuration: rate x duration
  double attempts = 0;     // over every run, in the worst case
  double fleet_syncs = 0;  // over the shared fleet runs
  double seconds = 0;      // the run's estimated time (see above)
  // The key most of the work comes from, to name in a refusal:
  // "config.NAME.retry.max_attempts", "fleet.sync_interval" or "duration"; with the
  // first, the configuration's index.
  std::string heaviest;
  std::optional<std::size_t> heaviest_configuration;
};

// The estimate for simulate() (as_fleet false: every configuration, side by side) or
// simulate_fleet() (as_fleet true: the [fleet] table's configurations, three runs each).
WorkEstimate estimate_work(const Scenario& scenario, bool as_fleet);
// Throws InputError naming `field` (default: the estimate's heaviest key, in the
// scenario's file) when the estimate exceeds kMaxRunSeconds: "would take about N
// minutes ...; lower ...".
void check_work(const Scenario& scenario, bool as_fleet, const std::string& field = "");

// Reads a scenario ("-": standard input). Checks the work of the run it describes
// (check_work, as a fleet if it has a [fleet] table). Throws InputError. A key written
// under a deprecated name is read, and a warning naming its new name is appended to
// `warnings` (or, when it is null, printed to standard error).
Scenario load_scenario_file(const std::string& path, std::vector<InputError>* warnings = nullptr);
Scenario parse_scenario(std::string_view toml, const std::string& source_name,
                        std::vector<InputError>* warnings = nullptr);

// The built-in incident (tools/examples/incident.toml, compiled in), as text and parsed.
std::string_view builtin_scenario_toml();
Scenario builtin_scenario();

// The built-in scenarios by name: "incident" (the above), "overload"
// (tools/examples/overload.toml: traffic ramps past a server's capacity) and
// "retry-storm" (tools/examples/retry_storm.toml: a short trigger and unbudgeted
// retries keep a server overloaded). An unknown name: empty text, and InputError
// naming `field` with the names there are.
std::string_view builtin_scenario_toml(std::string_view name);
Scenario builtin_scenario(std::string_view name, const std::string& field = "--builtin");
inline constexpr std::string_view kBuiltinScenarioNames[] = {"incident", "overload", "retry-storm"};

// Reads a file whose only table is [breaker] (what `bulwark replay --config` takes;
// "-": standard input). Throws InputError; deprecated keys as for load_scenario_file.
BreakerSpec load_breaker_file(const std::string& path, std::vector<InputError>* warnings = nullptr);
BreakerSpec parse_breaker(std::string_view toml, const std::string& source_name,
                          std::vector<InputError>* warnings = nullptr);

// Names as written in TOML.
std::string_view to_string(WindowKind kind) noexcept;
std::string_view to_string(ArrivalProcess process) noexcept;
std::string_view to_string(Latency::Distribution d) noexcept;
std::string describe(const Latency& latency);  // "lognormal median 120ms sigma 0.40"

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_CONFIG_H_
