// The breaker never creates a thread, timer or task: 100,000 breakers go
// through full open / half-open / close cycles and the process's thread count is
// unchanged. Counted from /proc/self/task, which lists every thread of the process.

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <filesystem>

#include "bulwark/circuit_breaker.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

TEST(NoBackgroundThreads, HundredThousandBreakersThroughFullCycles) {
  constexpr int kBreakers = 100'000;
  ManualClock clock;
  BreakerPolicy<ManualClock> policy(
      {.consecutive_failures = 2, .open_duration = 10s, .half_open = {.probes = 1}}, clock);
  const std::size_t threads_before = thread_count();
  std::deque<BasicCircuitBreaker<ManualClock>> breakers;
  for (int i = 0; i < kBreakers; ++i) breakers.emplace_back(policy);

  for (int cycle = 0; cycle < 2; ++cycle) {
    for (auto& b : breakers) {
      b.try_acquire()->record_failure();
      b.try_acquire()->record_failure();
      ASSERT_EQ(b.state(), State::open);
    }
    EXPECT_EQ(thread_count(), threads_before);
    clock.advance(10s);  // nothing happens: nobody is asking
    for (auto& b : breakers) ASSERT_EQ(b.state(), State::open);
    for (auto& b : breakers) {
      auto probe = b.try_acquire();
      ASSERT_TRUE(probe);
      ASSERT_EQ(b.state(), State::half_open);
      probe->record_success();
      ASSERT_EQ(b.state(), State::closed);
    }
  }
  EXPECT_EQ(thread_count(), threads_before);
  EXPECT_EQ(breakers.back().snapshot().opens, 2u);
}

}  // namespace
}  // namespace bulwark
