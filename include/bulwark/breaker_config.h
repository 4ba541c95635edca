// bulwark/breaker_config.h — what a circuit breaker is told to do.
//
// A plain struct, read top to bottom like a runbook, validated once when the breaker
// is built (`validate()` names the first bad field). Names follow Resilience4j where it
// has one (minimum_calls, slow_call_duration, ...), in snake_case.
//
//   // seed 002's fixed configuration for the reviews service
//   bulwark::BreakerConfig reviews{
//       .name = "reviews",
//       .failure_rate = 0.30,                // trip at 30 % failures...
//       .slow_call_rate = 0.30,              // ...or 30 % slow calls...
//       .slow_call_duration = 400ms,         // ...slower than 400 ms, even successful ones...
//       .minimum_calls = 20,                 // ...once 20 calls are in the window
//       .window_length = 10s,                // TimeWindowBreaker: the last 10 s
//       .open_duration = 30s,
//       .half_open_fraction = 0.10,          // probe with 10 % of the traffic
//   };
//
// Trip rules combine: any one that fires opens the breaker. Rate rules need a sliding
// window, which is the breaker's second template parameter (sliding_window.h); asking
// a breaker without one for a rate rule is a configuration error, not a silent no-op.

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

struct BreakerConfig {
  // Identifies the breaker in events, snapshots and metrics.
  std::string name = "default";

  // Trip rule: open after this many consecutive failures (a success resets the
  // count). 0 turns the rule off. At most 65535.
  std::uint32_t consecutive_failures = 5;

  // --- Rate rules (need a window: CountWindowBreaker or TimeWindowBreaker) ---
  // Trip when failures / calls in the window >= failure_rate, once at least
  // minimum_calls are in the window. In (0, 1]; unset turns the rule off.
  std::optional<double> failure_rate{};
  // Trip when slow calls / calls >= slow_call_rate (same minimum). In (0, 1]; unset: off.
  std::optional<double> slow_call_rate{};
  // A call that takes strictly longer than this is slow, whether it succeeded or failed.
  // Zero: slowness is not judged. The breaker measures a call itself (with the clock's
  // coarse reading, a few ms of resolution) unless the caller reports its duration.
  Nanos slow_call_duration = Nanos::zero();
  // The minimum volume: no rate rule fires on fewer calls (a count window of fewer
  // calls uses its size). Does not apply to half-open probes.
  std::uint32_t minimum_calls = 100;
  // CountWindowBreaker: the window is the last window_size calls (1..65535).
  std::uint32_t window_size = 100;
  // TimeWindowBreaker: the window is the last window_length, in window_buckets buckets
  // (each at least 1 ms; at most the breaker type's capacity, 10 for TimeWindowBreaker).
  Nanos window_length = std::chrono::seconds(60);
  std::uint32_t window_buckets = 10;
  // Calls admitted more than slow_call_duration ago and still outstanding count as slow
  // when the rates are evaluated, so a dependency that stops answering trips the
  // breaker before any call completes or times out (beyond Resilience4j, which only
  // judges completed calls). Off by default: it costs one more atomic update when a
  // call is admitted and one when it completes (docs/performance.md). Calls are
  // grouped by admission into epochs (the power of two nanoseconds at or above
  // slow_call_duration, E), and an epoch's calls count once all of them are older than
  // slow_call_duration: a call counts as slow between D and D + E (< 2D) after it was
  // admitted, never before; without completions the rates are re-evaluated at the
  // first admission of each epoch, which can add up to another E before a trip.
  // Needs slow_call_duration of at least 1 ms.
  bool count_in_flight_slow_calls = false;

  // How long the breaker stays OPEN before it lets a probe through.
  Nanos open_duration = std::chrono::seconds(60);
  // Each consecutive reopening (a probe failed) multiplies the open period by this,
  // up to max_open_duration; a successful close returns it to open_duration. >= 1.
  double open_duration_multiplier = 1.0;
  // The cap on that growth; required (>= open_duration) when the multiplier is > 1.
  // Zero means unset: with a multiplier of 1 the period simply never grows.
  Nanos max_open_duration = Nanos::zero();

  // HALF_OPEN admits at most this many probes at once (K). Unset: 1, or no limit when
  // half_open_fraction is set.
  std::optional<std::uint32_t> half_open_max_calls{};
  // The probes a half-open round (or each ramp stage) judges (N). Without a rate rule, N
  // successes close the breaker (or pass the stage) and any probe failure reopens it.
  // With a failure_rate or slow_call_rate rule, the round's own rates over its N
  // outcomes decide, with no minimum volume: it reopens as soon as failures / N or
  // slow / N is certain to reach its threshold, and closes as soon as it is certain not
  // to even if every outcome still to come were a slow failure — at the latest when
  // all N are in. A probe counts in the stage it was admitted in.
  std::uint32_t half_open_successes = 1;
  // Instead of a count, let this fraction of requests through as probes (seed 002:
  // "10 % of the traffic"). In (0, 1]; unset: count mode.
  std::optional<double> half_open_fraction{};
  // Optional ramp: after each stage passes (see half_open_successes), move to the next fraction
  // (e.g. {0.25, 0.5, 1.0}); closes after the last stage. Non-decreasing, at most 7.
  std::vector<double> half_open_ramp{};
  // A probe that never reports (its permit leaked into a lost callback) stops holding
  // its slot this long after the half-open round began: the next request that finds
  // every slot taken starts a fresh round, which keeps the successes already counted
  // (probes still out then report into a round that is over). Set it well above the
  // calls' own timeout. Zero: never.
  Nanos half_open_max_wait = std::chrono::seconds(60);

  // A breaker that reopens within this period after recovering (a successful half-open
  // round closed it) is flapping (seed 003's "flickering circuit"): the opening's event
  // and the snapshot say so. Zero turns the detection off.
  Nanos flapping_period = std::chrono::seconds(60);

  // Where fraction mode draws its random numbers: uniform in [0, 1). Unset: a built-in
  // lock-free generator seeded with random_seed (deterministic). Tests inject their own.
  std::function<double()> random{};
  std::uint64_t random_seed = 0x2545F4914F6CDD1Dull;
};

// Which sliding window a breaker has; the same configuration checks differ by it.
enum class WindowKind : std::uint8_t { none, count, time };

// Checks every field for a breaker with the given kind of window (and, for a time
// window, bucket capacity); the error names the first field that is wrong.
Expected<void, ConfigError> validate(const BreakerConfig& config,
                                     WindowKind window = WindowKind::none,
                                     std::uint32_t bucket_capacity = 0);

}  // namespace bulwark

#endif  // BULWARK_BREAKER_CONFIG_H_
