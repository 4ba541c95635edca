// bulwark/breaker_config.h — what a circuit breaker is told to do.
//
// One configuration type per breaker kind, so that a field the breaker would not use
// cannot be written at all:
//
//   BreakerConfig       CircuitBreaker: trips on consecutive failures.
//   CountWindowConfig   CountWindowBreaker: trips on failure / slow-call rates over the
//                       last N calls (and, if asked, on consecutive failures).
//   TimeWindowConfig    TimeWindowBreaker: the same rates over the last T seconds.
//
//   bulwark::TimeWindowBreaker reviews({
//       .name = "reviews",
//       .window = {.length = 10s},           // the last 10 s...
//       .minimum_calls = 20,                 // ...once 20 calls are in it
//       .failure_rate = 0.30,                // trip at 30 % failures...
//       .slow_call_rate = 0.30,              // ...or 30 % calls slower than 400 ms
//       .slow_call_duration = 400ms,
//       .open_duration = 30s,
//       .half_open = {.fraction = 0.10},     // probe with 10 % of the traffic
//   });
//
// Every configuration is a plain aggregate, checked once when a breaker (or a
// BreakerPolicy) is built: `validate()` returns the first bad field by its dotted path
// ("window.length", "half_open.fraction"). Trip rules combine: any one that fires
// opens the breaker. Reading or copying a configuration is not synchronised; a built
// breaker keeps its own copy.

#ifndef BULWARK_BREAKER_CONFIG_H_
#define BULWARK_BREAKER_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/expected.h"

namespace bulwark {

// How the open period grows while probes keep failing. Each consecutive reopening
// multiplies the period by `multiplier` (>= 1), up to `max`; a successful close returns
// it to open_duration. `max` is required (>= open_duration) when the multiplier is
// above 1; zero means unset, and with a multiplier of 1 the period never grows.
struct OpenGrowth {
  double multiplier = 1.0;
  Nanos max = Nanos::zero();
};

// How a HALF_OPEN breaker probes the dependency before closing again.
struct HalfOpen {
  // N: the probes a half-open round (or each ramp stage) judges, 1..8191. Without a
  // rate rule, N successes close the breaker (or pass the stage) and any probe failure
  // reopens it. With a failure_rate or slow_call_rate rule, the round's own rates over
  // its N outcomes decide, with no minimum volume: it reopens as soon as failures / N
  // or slow / N is certain to reach its threshold, and closes as soon as it is certain
  // not to — at the latest when all N are in. A probe counts in the stage it was
  // admitted in.
  std::uint32_t probes = 1;
  // K: probes admitted at once, 1..65535. Unset: `probes` in count mode, no limit with
  // `fraction`. Setting it together with `fraction` is an error (the fraction is the
  // limit).
  std::optional<std::uint32_t> max_in_flight{};
  // Fraction mode: let this fraction of requests through as probes, in (0, 1].
  // Unset: count mode (at most max_in_flight probes at once).
  std::optional<double> fraction{};
  // Fraction mode only: after each stage passes, move to the next fraction (e.g.
  // {0.25, 0.5, 1.0}); the breaker closes after the last one. Non-decreasing, starting
  // at or above `fraction`, at most 7 stages.
  std::vector<double> ramp{};
  // A probe that never reports (its permit leaked) stops holding its slot this long
  // after the round began: the next request that finds every slot taken starts a fresh
  // round, which keeps the successes already counted. Set it well above the calls' own
  // timeout. Zero: never.
  Nanos max_wait = std::chrono::seconds(60);
  // Fraction mode's random source, uniform in [0, 1); it must be thread-safe. Unset: a
  // built-in lock-free generator started from `random_seed` (deterministic).
  std::function<double()> random{};
  std::uint64_t random_seed = 0x2545F4914F6CDD1Dull;
};

// CircuitBreaker (no sliding window): opens after `consecutive_failures` failures in a
// row. Costs nothing per call beyond the breaker's state word.
struct BreakerConfig {
  // Identifies the breaker in events, snapshots and metrics. Non-empty.
  std::string name = "default";
  // Opens after this many consecutive failures (a success resets the run). 1..65535.
  std::uint32_t consecutive_failures = 5;
  // How long the breaker stays OPEN before it lets a probe through. Positive.
  Nanos open_duration = std::chrono::seconds(60);
  OpenGrowth open_growth{};
  HalfOpen half_open{};
  // A breaker that reopens within this period after a successful half-open round closed
  // it is flapping: the opening's event and the snapshot say so, and the open period
  // continues to grow. Zero turns the detection off.
  Nanos flapping_period = std::chrono::seconds(60);
};

// The window of CountWindowBreaker: the last `size` calls, 1..65535. Costs two bytes
// per call of memory, allocated once when the breaker is built.
struct CountWindowShape {
  std::uint32_t size = 100;
};

// The window of TimeWindowBreaker: the last `length` (positive), kept in `buckets`
// buckets of at least 1 ms each (at most the breaker type's capacity: 10 for
// TimeWindowBreaker). Outcomes leave the window a bucket at a time.
struct TimeWindowShape {
  Nanos length = std::chrono::seconds(60);
  std::uint32_t buckets = 10;
};

// A breaker with a sliding window (CountWindowBreaker, TimeWindowBreaker): trips on
// failure and slow-call rates over the window. At least one trip rule must be set.
template <class Shape>
struct RateBreakerConfig {
  std::string name = "default";  // non-empty
  Shape window{};
  // The minimum volume: no rate rule fires on fewer calls in the window (a count window
  // of fewer calls uses its size). Does not apply to half-open probes. >= 1.
  std::uint32_t minimum_calls = 100;
  // Trip when failures / calls >= failure_rate. In (0, 1]; unset: off.
  std::optional<double> failure_rate{};
  // Trip when slow calls / calls >= slow_call_rate. In (0, 1]; unset: off. Needs
  // slow_call_duration.
  std::optional<double> slow_call_rate{};
  // A call that takes strictly longer than this is slow, successful or not. Zero:
  // slowness is not judged. The breaker measures a call itself (with the clock's coarse
  // reading, a few ms of resolution) unless the caller reports its duration; judging
  // slowness costs a coarse clock read per call.
  Nanos slow_call_duration = Nanos::zero();
  // Calls admitted more than slow_call_duration ago and still outstanding count as
  // slow, so a dependency that stops answering trips the breaker before any call
  // completes. Costs one more atomic update when a call is admitted and one when it
  // completes. A call counts as slow between D and D + E (< 2D) after admission, where
  // E is the power of two nanoseconds at or above D = slow_call_duration; without
  // completions the rates are re-evaluated once per E. Needs slow_call_duration >= 1 ms.
  bool count_in_flight_slow_calls = false;
  // Also open after this many consecutive failures, 1..65535; 0 (the default) turns the
  // rule off. Off by default because a breaker configured by rates should trip by
  // those rates only: a consecutive-failure rule that nobody asked for would open it
  // on a short burst the rates were chosen to tolerate.
  std::uint32_t consecutive_failures = 0;
  Nanos open_duration = std::chrono::seconds(60);  // positive
  OpenGrowth open_growth{};
  HalfOpen half_open{};
  Nanos flapping_period = std::chrono::seconds(60);  // see BreakerConfig; zero: off
};

using CountWindowConfig = RateBreakerConfig<CountWindowShape>;
using TimeWindowConfig = RateBreakerConfig<TimeWindowShape>;

// Which sliding window a breaker has.
enum class WindowKind : std::uint8_t { none, count, time };

// Check every field; the error names the first wrong one by its dotted path. Costs a
// copy of the configuration; thread-safe. A time window's bucket count is checked
// against `bucket_capacity`, the breaker type's capacity (TimeWindowBreaker: 10).
// Building a breaker or a BreakerPolicy runs the same checks and throws InvalidConfig.
Expected<void, ConfigError> validate(const BreakerConfig& config);
Expected<void, ConfigError> validate(const CountWindowConfig& config);
Expected<void, ConfigError> validate(const TimeWindowConfig& config,
                                     std::uint32_t bucket_capacity = 10);

namespace detail {

// Every breaker configuration in one normalised, clock-independent form: what the
// breaker's state machine reads. Fields a kind of breaker lacks hold neutral values
// (no window, no rates).
struct BreakerSpec {
  std::string name;
  WindowKind window = WindowKind::none;
  std::uint32_t window_size = 0;        // count window
  Nanos window_length = Nanos::zero();  // time window
  std::uint32_t window_buckets = 0;     // time window
  std::uint32_t minimum_calls = 1;
  std::optional<double> failure_rate{};
  std::optional<double> slow_call_rate{};
  Nanos slow_call_duration = Nanos::zero();
  bool count_in_flight_slow_calls = false;
  std::uint32_t consecutive_failures = 0;
  Nanos open_duration = Nanos::zero();
  OpenGrowth open_growth{};
  HalfOpen half_open{};
  Nanos flapping_period = Nanos::zero();
};

BreakerSpec spec_of(BreakerConfig config);
BreakerSpec spec_of(CountWindowConfig config);
BreakerSpec spec_of(TimeWindowConfig config);

// Checks a spec; field names are the configuration's dotted paths. `bucket_capacity`
// bounds a time window's buckets.
Expected<void, ConfigError> validate_spec(const BreakerSpec& spec, std::uint32_t bucket_capacity);

}  // namespace detail
}  // namespace bulwark

#endif  // BULWARK_BREAKER_CONFIG_H_
