// A breaker trips on a failing dependency and recovers when it heals — in virtual
// time, so the whole story takes microseconds. Every transition is printed by a
// listener, on the thread whose request caused it.
//
//   build/release/examples/trip_and_recover

#include <chrono>
#include <cstdio>
#include <string>

#include "bulwark/circuit_breaker.h"

using namespace std::chrono_literals;

int main() {
  bulwark::ManualClock clock;
  bulwark::BreakerPolicy<bulwark::ManualClock> policy(
      {.name = "inventory",
       .consecutive_failures = 3,
       .open_duration = 10s,
       .open_growth = {.multiplier = 2.0, .max = 60s},
       .half_open = {.probes = 2, .max_in_flight = 1}},
      clock);
  policy.on_transition([](const bulwark::TransitionEvent& e) {
    std::printf("  t=%5.1fs  %-9s -> %-9s (%s)\n", static_cast<double>(e.at) / 1e9,
                std::string(to_string(e.from)).c_str(), std::string(to_string(e.to)).c_str(),
                std::string(to_string(e.reason)).c_str());
  });
  bulwark::BasicCircuitBreaker<bulwark::ManualClock> breaker(policy);

  // The dependency fails from t=2s until t=30s, then answers again.
  auto dependency_ok = [&] {
    const auto t = clock.now().time_since_epoch();
    return t < 2s || t >= 30s;
  };

  int served = 0, failed = 0, rejected = 0;
  std::printf("one request every 500 ms; the dependency is down from 2 s to 30 s\n");
  for (int i = 0; i < 120; ++i) {
    if (auto permit = breaker.try_acquire()) {
      if (dependency_ok()) {
        permit->record_success();
        ++served;
      } else {
        permit->record_failure();
        ++failed;
      }
    } else {
      ++rejected;
    }
    clock.advance(500ms);
  }

  const bulwark::BreakerSnapshot s = breaker.snapshot();
  std::printf("\nserved %d, failed %d, rejected fast %d (of 120 requests)\n", served, failed,
              rejected);
  std::printf(
      "final state %s; opened %llu times; %llu calls reached the dependency while it was down\n",
      std::string(to_string(s.state)).c_str(), static_cast<unsigned long long>(s.opens),
      static_cast<unsigned long long>(s.failures));
  return s.state == bulwark::State::closed ? 0 : 1;
}
