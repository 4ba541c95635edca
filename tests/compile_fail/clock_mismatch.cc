// A pipeline stage that runs on another clock than the context's must not compile.
//
// Built as is, this is the control: every stage on the context's ManualClock; it must
// compile and run. With -DBULWARK_WRONG_CLOCK_BREAKER (_BULKHEAD, _RETRY) that stage
// runs on the steady clock instead, and the compiler must stop at the pipeline's
// static_assert naming it (tests/compile_fail/CMakeLists.txt checks the message).
// With -DBULWARK_WRONG_CLOCK_SLEEPER the retry is on the context's clock but its
// sleeper sleeps in real time: BasicRetry's own static_assert must stop it.

#include <chrono>
#include <cstdio>

#include "bulwark/pipeline.h"

int main() {
  using namespace std::chrono_literals;
  using Clock = bulwark::ManualClock;
  Clock clock;
  bulwark::BreakerConfig config;
  config.name = "dep";

#if defined(BULWARK_WRONG_CLOCK_BREAKER)
  bulwark::CircuitBreaker breaker(config);
#else
  bulwark::BasicCircuitBreaker<Clock> breaker(config, clock);
#endif
#if defined(BULWARK_WRONG_CLOCK_BULKHEAD)
  bulwark::Bulkhead pool(bulwark::BulkheadConfig{.name = "dep", .max_concurrent = 1});
#else
  bulwark::BasicBulkhead<Clock> pool(bulwark::BulkheadConfig{.name = "dep", .max_concurrent = 1},
                                     clock);
#endif
#if defined(BULWARK_WRONG_CLOCK_RETRY)
  bulwark::Retry retry(bulwark::RetryConfig{.name = "dep"});
#elif defined(BULWARK_WRONG_CLOCK_SLEEPER)
  bulwark::BasicRetry<Clock> retry(bulwark::RetryConfig{.name = "dep"}, clock,
                                   bulwark::ThreadSleeper{});
#else
  bulwark::BasicRetry<Clock, bulwark::ManualSleeper> retry(bulwark::RetryConfig{.name = "dep"},
                                                           clock, bulwark::ManualSleeper(clock));
#endif

  auto p = bulwark::pipeline(bulwark::breaker(breaker), bulwark::bulkhead(pool),
                             bulwark::retry(retry), bulwark::timeout(1s));
  auto r =
      p(bulwark::BasicContext<Clock>(clock), []() -> bulwark::Expected<int, int> { return 1; });
  if (!r || *r != 1) {
    std::puts("the control pipeline failed");
    return 1;
  }
  std::puts("ok");
  return 0;
}
