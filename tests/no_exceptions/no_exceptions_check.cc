// Built with -fno-exceptions: the breaker's whole public API, with errors as values.
#if defined(__cpp_exceptions)
#error "this file must be compiled with -fno-exceptions"
#endif

#include <chrono>
#include <cstdio>

#include "bulwark/circuit_breaker.h"

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main() {
  using namespace std::chrono_literals;
  bulwark::BreakerConfig config{
      .name = "no-exceptions", .consecutive_failures = 2, .open_duration = 5s};
  CHECK(bulwark::validate(config));
  CHECK(!bulwark::validate(bulwark::BreakerConfig{.half_open = {.max_in_flight = 0}}));

  bulwark::ManualClock clock;
  bulwark::BasicCircuitBreaker<bulwark::ManualClock> breaker(config, clock);
  auto v = breaker.execute([] { return 3; });
  CHECK(v && *v == 3);
  breaker.try_acquire()->record_failure();
  breaker.try_acquire()->record_failure();
  CHECK(breaker.state() == bulwark::State::open);
  auto rejected = breaker.execute([] { return 4; });
  CHECK(!rejected && rejected.error().reason == bulwark::RejectReason::open);
  clock.advance(5s);
  CHECK(breaker.execute([] {}));
  CHECK(breaker.state() == bulwark::State::closed);
  CHECK(!breaker.transition_to(bulwark::State::half_open));
  std::puts("ok");
  return 0;
}
