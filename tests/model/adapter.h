// The one place that turns a model configuration into the real breaker's
// configuration. Every breaker configuration field the model tests use is named here.

#ifndef BULWARK_TESTS_MODEL_ADAPTER_H_
#define BULWARK_TESTS_MODEL_ADAPTER_H_

#include <chrono>
#include <functional>
#include <type_traits>

#include "bulwark/breaker_config.h"
#include "bulwark/circuit_breaker.h"
#include "model.h"

namespace bulwark::model {

using NoWindowBreaker = BasicCircuitBreaker<ManualClock, NoWindow>;
using CountBreaker = BasicCircuitBreaker<ManualClock, CountWindow>;
using TimeBreaker = BasicCircuitBreaker<ManualClock, TimeWindow<10>>;

inline constexpr std::uint32_t kTimeCapacity = 10;

// The half-open and growth parts every breaker kind shares.
inline HalfOpen to_half_open(const Config& c, std::function<double()> random) {
  HalfOpen h;
  h.probes = c.half_open_successes;
  h.max_in_flight = c.half_open_max_calls;
  h.fraction = c.half_open_fraction;
  h.ramp = c.half_open_ramp;
  h.max_wait = Nanos(c.half_open_max_wait);
  h.random = std::move(random);
  return h;
}

// `random` replaces the model config's draw function (the real breaker draws from its
// own copy of the same sequence). B is the real breaker type: its Config is built.
template <class B>
typename B::Config to_breaker_config(const Config& c, std::function<double()> random) {
  typename B::Config b;
  b.name = "model";
  b.consecutive_failures = c.consecutive_failures;
  b.open_duration = Nanos(c.open_duration);
  b.open_growth = {.multiplier = c.open_duration_multiplier, .max = Nanos(c.max_open_duration)};
  b.half_open = to_half_open(c, std::move(random));
  b.flapping_period = Nanos(c.flapping_period);
  if constexpr (!std::is_same_v<typename B::Config, BreakerConfig>) {
    b.failure_rate = c.failure_rate;
    b.slow_call_rate = c.slow_call_rate;
    b.slow_call_duration = Nanos(c.slow_call_duration);
    b.minimum_calls = c.minimum_calls;
    b.count_in_flight_slow_calls = c.count_in_flight_slow_calls;
    if constexpr (std::is_same_v<typename B::Config, CountWindowConfig>) {
      b.window.size = c.window_size;
    } else {
      b.window.length = Nanos(c.window_length);
      b.window.buckets = c.window_buckets;
    }
  }
  return b;
}

// True if the real breaker accepts `c` for its kind of window. Rate fields on a breaker
// without a window cannot be expressed in its configuration type at all: such a model
// configuration is not valid.
inline bool valid(const Config& c) {
  const auto none = [] { return 0.0; };
  switch (c.window) {
    case Window::none:
      if (c.failure_rate || c.slow_call_rate || c.count_in_flight_slow_calls) return false;
      return static_cast<bool>(validate(to_breaker_config<NoWindowBreaker>(c, none)));
    case Window::count:
      return static_cast<bool>(validate(to_breaker_config<CountBreaker>(c, none)));
    case Window::time:
      return static_cast<bool>(validate(to_breaker_config<TimeBreaker>(c, none), kTimeCapacity));
  }
  return false;
}

}  // namespace bulwark::model

#endif  // BULWARK_TESTS_MODEL_ADAPTER_H_
