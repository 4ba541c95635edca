// A breaker configuration that names a field its breaker type does not have, or a
// configuration of another kind of breaker, must not compile.
//
// Built as is, this is the control: each breaker type with its own configuration; it
// must compile and run. Each BULWARK_MISCONFIGURED_* macro adds one mistake, and the
// compiler must stop at it (tests/compile_fail/CMakeLists.txt checks the message):
//   RATE_ON_CIRCUIT_BREAKER  a failure_rate in CircuitBreaker::Config
//   WINDOW_ON_BREAKER_CONFIG a window in BreakerConfig
//   TIME_CONFIG_ON_COUNT     a TimeWindowConfig given to a CountWindowBreaker

#include <chrono>
#include <cstdio>

#include "bulwark/circuit_breaker.h"

int main() {
  using namespace std::chrono_literals;
  bulwark::CircuitBreaker plain(bulwark::CircuitBreaker::Config{.consecutive_failures = 3});
  bulwark::CountWindowBreaker counted({.window = {.size = 20}, .failure_rate = 0.5});
  bulwark::TimeWindowBreaker timed{{.window = {.length = 10s}, .failure_rate = 0.3}};
#if defined(BULWARK_MISCONFIGURED_RATE_ON_CIRCUIT_BREAKER)
  bulwark::CircuitBreaker::Config rated{.failure_rate = 0.3};
#endif
#if defined(BULWARK_MISCONFIGURED_WINDOW_ON_BREAKER_CONFIG)
  bulwark::BreakerConfig windowed{.window = {.size = 20}};
#endif
#if defined(BULWARK_MISCONFIGURED_TIME_CONFIG_ON_COUNT)
  bulwark::TimeWindowConfig time_config{.window = {.length = 10s}, .failure_rate = 0.3};
  bulwark::CountWindowBreaker wrong(time_config);
#endif
  if (!plain.try_acquire() || !counted.try_acquire() || !timed.try_acquire()) {
    std::puts("a breaker of the control rejected a call");
    return 1;
  }
  std::puts("ok");
  return 0;
}
