// bulwark/lab/config.h — resilience configurations and simulation scenarios, from TOML.
//
// Every option of the breaker, retry, retry budget, bulkhead and fallback can be set
// in TOML under the library's own field name (docs/configuration.md is the reference):
//
//   [breaker]                        # what `bulwark replay --config` reads
//   window = "time"                  # none | count | time: picks the breaker type
//   failure_rate = 0.30
//   slow_call_rate = 0.30
//   slow_call_duration = "400ms"
//   minimum_calls = 20
//   window_length = "10s"
//   open_duration = "30s"
//   half_open_fraction = 0.10
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
// Options that are functions in the library (BreakerConfig::random,
// RetryConfig::random, RetryConfig::idempotency_key, Backoff::custom) cannot be
// written in TOML; the random sources are replaced by seeded generators (random_seed).

#ifndef BULWARK_LAB_CONFIG_H_
#define BULWARK_LAB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/breaker_config.h"
#include "bulwark/bulkhead.h"
#include "bulwark/clock.h"
#include "bulwark/fallback.h"
#include "bulwark/pipeline.h"
#include "bulwark/retry.h"
#include "bulwark/retry_budget.h"

namespace bulwark::lab {

// Bucket capacity of the lab's time-window breaker: window_buckets may go up to this.
inline constexpr std::uint32_t kTimeWindowCapacity = 120;

// A breaker configuration and the kind of window (hence breaker type) it runs on.
struct BreakerSpec {
  BreakerConfig config;
  WindowKind window = WindowKind::none;
};

// A retry policy; `config.random` is a SplitMix64 seeded with `random_seed`.
struct RetrySpec {
  RetryConfig config;
  std::uint64_t random_seed = 0;
};

// One named way of calling the dependency: the pipeline's stages, each optional.
struct ResilienceConfig {
  std::string name;
  std::optional<Nanos> timeout;  // per attempt; none: the call takes what it takes
  std::optional<BreakerSpec> breaker;
  BreakerScope breaker_scope = BreakerScope::call;
  std::optional<BulkheadConfig> bulkhead;
  std::optional<RetrySpec> retry;
  std::optional<RetryBudgetConfig> retry_budget;  // only with a retry
  std::optional<Reasons> fallback;                // the reasons a degraded page answers
  // Report when the breaker has been away from CLOSED this long (seed 002's alert).
  std::optional<Nanos> alert_when_open_for;
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
};

struct Dependency {
  std::string name = "dependency";
  std::vector<Phase> phases;  // the first starts at 0; starts strictly increase
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

  // When the first degraded phase starts and the next non-degraded one starts (or the
  // end); empty if no phase is degraded.
  std::optional<Nanos> degraded_from() const;
  Nanos degraded_until() const;
};

// Reads a scenario ("-": standard input). Throws InputError.
Scenario load_scenario_file(const std::string& path);
Scenario parse_scenario(std::string_view toml, const std::string& source_name);

// The built-in incident (tools/examples/incident.toml, compiled in), as text and parsed.
std::string_view builtin_scenario_toml();
Scenario builtin_scenario();

// Reads a file whose only table is [breaker] (what `bulwark replay --config` takes;
// "-": standard input). Throws InputError.
BreakerSpec load_breaker_file(const std::string& path);
BreakerSpec parse_breaker(std::string_view toml, const std::string& source_name);

// Names as written in TOML.
std::string_view to_string(WindowKind kind) noexcept;
std::string_view to_string(ArrivalProcess process) noexcept;
std::string_view to_string(Latency::Distribution d) noexcept;
std::string describe(const Latency& latency);  // "lognormal median 120ms sigma 0.40"

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_CONFIG_H_
