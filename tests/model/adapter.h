// The one place that turns a model configuration into the real breaker's
// configuration. Every BreakerConfig field the model tests use is named here.

#ifndef BULWARK_TESTS_MODEL_ADAPTER_H_
#define BULWARK_TESTS_MODEL_ADAPTER_H_

#include <chrono>
#include <functional>

#include "bulwark/breaker_config.h"
#include "bulwark/circuit_breaker.h"
#include "model.h"

namespace bulwark::model {

using NoWindowBreaker = BasicCircuitBreaker<ManualClock, NoWindow>;
using CountBreaker = BasicCircuitBreaker<ManualClock, CountWindow>;
using TimeBreaker = BasicCircuitBreaker<ManualClock, TimeWindow<10>>;

inline constexpr std::uint32_t kTimeCapacity = 10;

inline WindowKind kind_of(Window w) {
  return w == Window::none    ? WindowKind::none
         : w == Window::count ? WindowKind::count
                              : WindowKind::time;
}

// `random` replaces the model config's draw function (the real breaker draws from its
// own copy of the same sequence).
inline BreakerConfig to_breaker_config(const Config& c, std::function<double()> random) {
  BreakerConfig b;
  b.name = "model";
  b.consecutive_failures = c.consecutive_failures;
  b.failure_rate = c.failure_rate;
  b.slow_call_rate = c.slow_call_rate;
  b.slow_call_duration = Nanos(c.slow_call_duration);
  b.minimum_calls = c.minimum_calls;
  b.window_size = c.window_size;
  b.window_length = Nanos(c.window_length);
  b.window_buckets = c.window_buckets;
  b.count_in_flight_slow_calls = c.count_in_flight_slow_calls;
  b.open_duration = Nanos(c.open_duration);
  b.open_duration_multiplier = c.open_duration_multiplier;
  b.max_open_duration = Nanos(c.max_open_duration);
  b.half_open_max_calls = c.half_open_max_calls;
  b.half_open_successes = c.half_open_successes;
  b.half_open_fraction = c.half_open_fraction;
  b.half_open_ramp = c.half_open_ramp;
  b.half_open_max_wait = Nanos(c.half_open_max_wait);
  b.flapping_period = Nanos(c.flapping_period);
  b.random = std::move(random);
  return b;
}

// True if the real breaker accepts `c` for its kind of window.
inline bool valid(const Config& c) {
  return static_cast<bool>(validate(to_breaker_config(c, [] { return 0.0; }), kind_of(c.window),
                                    c.window == Window::time ? kTimeCapacity : 0));
}

}  // namespace bulwark::model

#endif  // BULWARK_TESTS_MODEL_ADAPTER_H_
