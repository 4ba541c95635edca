// BreakerPolicy::reconfigure and BasicRegistry::reconfigure: live breakers take new
// thresholds for their next decisions and keep their state; an invalid or unsupported
// change is refused and changes nothing; under threads (run it under TSan) a reload
// racing with calls in flight is safe.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/registry.h"

namespace {

using namespace std::chrono_literals;
using bulwark::BasicCircuitBreaker;
using bulwark::BreakerConfig;
using bulwark::CountWindow;
using bulwark::CountWindowConfig;
using bulwark::InvalidConfig;
using bulwark::ManualClock;
using bulwark::State;

using Breaker = BasicCircuitBreaker<ManualClock>;
using WindowBreaker = BasicCircuitBreaker<ManualClock, CountWindow>;

void fail(Breaker& b, int n) {
  for (int i = 0; i < n; ++i) {
    auto p = b.try_acquire();
    ASSERT_TRUE(p.has_value());
    p->record_failure();
  }
}

// The failures already counted stay counted; the next one is judged by the new rule.
TEST(Reconfigure, ALowerThresholdCountsTheFailuresAlreadySeen) {
  ManualClock clock;
  Breaker::Policy policy(BreakerConfig{.name = "db", .consecutive_failures = 5}, clock);
  Breaker b(policy);
  fail(b, 3);
  EXPECT_EQ(b.state(), State::closed);
  policy.reconfigure(BreakerConfig{.name = "db", .consecutive_failures = 4});
  EXPECT_EQ(b.config().consecutive_failures, 4u);
  fail(b, 1);  // 4 in a row: the new rule opens it (the old one would not)
  EXPECT_EQ(b.state(), State::open);
}

// An OPEN period in progress stays OPEN across a reload; its end is judged against the
// new open_duration from then on.
TEST(Reconfigure, AnOpenBreakerStaysOpenAndTheNewOpenDurationDecidesItsEnd) {
  ManualClock clock;
  Breaker::Policy policy(
      BreakerConfig{.name = "db", .consecutive_failures = 1, .open_duration = 60s}, clock);
  Breaker b(policy);
  fail(b, 1);
  ASSERT_EQ(b.state(), State::open);
  clock.advance(10s);
  policy.reconfigure(BreakerConfig{.name = "db", .consecutive_failures = 1, .open_duration = 20s});
  EXPECT_EQ(b.state(), State::open);
  EXPECT_FALSE(b.try_acquire().has_value());  // 10 s of 20 s
  clock.advance(11s);
  auto probe = b.try_acquire();  // 21 s: past the new period
  ASSERT_TRUE(probe.has_value());
  probe->record_success();
  EXPECT_EQ(b.state(), State::closed);
}

// A permit admitted before the reload reports after it, into the same state.
TEST(Reconfigure, PermitsInFlightSurviveAndRatesUseTheNewThreshold) {
  ManualClock clock;
  CountWindowConfig c{
      .name = "api", .window = {.size = 10}, .minimum_calls = 10, .failure_rate = 0.5};
  WindowBreaker::Policy policy(c, clock);
  WindowBreaker b(policy);
  for (int i = 0; i < 6; ++i) b.try_acquire()->record_success();
  for (int i = 0; i < 3; ++i) b.try_acquire()->record_failure();
  auto in_flight = b.try_acquire();
  ASSERT_TRUE(in_flight.has_value());
  c.failure_rate = 0.3;
  policy.reconfigure(c);
  in_flight->record_failure();  // 4 of 10 failed: >= 30 % (it was < 50 %)
  EXPECT_EQ(b.state(), State::open);
}

TEST(Reconfigure, AnInvalidOrUnsupportedChangeIsRefusedAndChangesNothing) {
  ManualClock clock;
  const CountWindowConfig c{
      .name = "api", .window = {.size = 10}, .minimum_calls = 10, .failure_rate = 0.5};
  WindowBreaker::Policy policy(c, clock);
  WindowBreaker b(policy);
  CountWindowConfig bad = c;
  bad.failure_rate = 1.5;
  try {
    policy.reconfigure(bad);
    ADD_FAILURE();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "failure_rate");
  }
  CountWindowConfig resized = c;
  resized.window.size = 20;
  try {
    policy.reconfigure(resized);
    ADD_FAILURE();
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "window.size");
  }
  EXPECT_EQ(*b.config().failure_rate, 0.5);
  for (int i = 0; i < 4; ++i) b.try_acquire()->record_failure();
  for (int i = 0; i < 6; ++i) b.try_acquire()->record_success();
  EXPECT_EQ(b.state(), State::closed);  // 40 % < the unchanged 50 %
}

// Threads call a registry's breakers while another reloads it over and over. No crash
// or race (TSan), no permit lost (every call reports), and when the reloads stop every
// key's breaker, old or new, decides by the last configuration.
TEST(ReconfigureStress, ReloadsRacingWithCallsInFlight) {
  ManualClock clock;
  using Registry = bulwark::BasicRegistry<std::string, WindowBreaker>;
  Registry::Options o;
  o.name = "hosts";
  o.breaker = CountWindowConfig{
      .name = "hosts", .window = {.size = 20}, .minimum_calls = 20, .failure_rate = 0.9};
  Registry reg(o, clock);
  std::atomic<bool> stop{false};
  std::atomic<long> admitted{0}, reported{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        auto call = reg.try_acquire("host" + std::to_string((i + t) % 8));
        if (!call) continue;
        ++admitted;
        call->record(i % 5 == 0 ? bulwark::Outcome::failure : bulwark::Outcome::success);
        ++reported;
      }
    });
  }
  std::thread reloader([&] {
    for (int i = 0; !stop.load(); ++i) {
      CountWindowConfig next = o.breaker;
      next.failure_rate = i % 2 == 0 ? 0.6 : 0.95;
      next.minimum_calls = 10 + static_cast<std::uint32_t>(i % 10);
      reg.reconfigure(next);
    }
  });
  for (auto& c : callers) c.join();
  stop = true;
  reloader.join();
  EXPECT_EQ(admitted.load(), reported.load());

  CountWindowConfig last = o.breaker;
  last.failure_rate = 0.1;  // 20 % failures now trip every key
  reg.reconfigure(last);
  for (int k = 0; k < 8; ++k) {
    auto h = reg.get("host" + std::to_string(k));
    EXPECT_EQ(*h->config().failure_rate, 0.1);
    for (int i = 0; i < 20 && h->state() == State::closed; ++i) {
      auto call = h->try_acquire();
      if (call) call->record(i % 5 == 0 ? bulwark::Outcome::failure : bulwark::Outcome::success);
    }
    EXPECT_EQ(h->state(), State::open) << "host" << k;
  }
}

}  // namespace
