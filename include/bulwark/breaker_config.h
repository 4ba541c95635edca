// bulwark/breaker_config.h — what a circuit breaker is told to do.
//
// A plain struct, read top to bottom like a runbook, validated once when the breaker
// is built (`validate()` names the first bad field). Names follow Resilience4j where it
// has one (minimum_calls, slow_call_duration, ...), in snake_case.
//
//   bulwark::BreakerConfig config{
//       .name = "payments",
//       .consecutive_failures = 5,           // seed 000 / gobreaker's ReadyToTrip
//       .open_duration = 30s,                // first open period
//       .open_duration_multiplier = 2.0,     // each consecutive reopen waits longer...
//       .max_open_duration = 5min,           // ...up to this
//       .half_open_max_calls = 3,            // probes in flight at once
//       .half_open_successes = 3,            // successes needed to close
//   };

#ifndef BULWARK_BREAKER_CONFIG_H_
#define BULWARK_BREAKER_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <string>

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

  // How long the breaker stays OPEN before it lets a probe through.
  Nanos open_duration = std::chrono::seconds(60);
  // Each consecutive reopening (a probe failed) multiplies the open period by this,
  // up to max_open_duration; a successful close returns it to open_duration. >= 1.
  double open_duration_multiplier = 1.0;
  // The cap on that growth; required (>= open_duration) when the multiplier is > 1.
  // Zero means unset: with a multiplier of 1 the period simply never grows.
  Nanos max_open_duration = Nanos::zero();

  // HALF_OPEN admits at most this many probes at once (K)...
  std::uint32_t half_open_max_calls = 1;
  // ...and closes after this many of them succeed (M). Any probe failure reopens.
  std::uint32_t half_open_successes = 1;
  // A probe that never reports (its permit leaked into a lost callback) stops holding
  // its slot this long after HALF_OPEN began: the next request that finds every slot
  // taken starts a fresh half-open round. Zero: never.
  Nanos half_open_max_wait = std::chrono::seconds(60);
};

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const BreakerConfig& config);

}  // namespace bulwark

#endif  // BULWARK_BREAKER_CONFIG_H_
