#include "bulwark/retry_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Budget = BasicRetryBudget<ManualClock>;

TEST(RetryBudget, StartsWithOneSecondOfFloor) {
  ManualClock clock;
  Budget budget({.ratio = 0.2, .min_retries_per_second = 3, .max_tokens = 100}, clock);
  EXPECT_DOUBLE_EQ(budget.tokens(), 3.0);
  Budget capped({.ratio = 0.2, .min_retries_per_second = 50, .max_tokens = 10}, clock);
  EXPECT_DOUBLE_EQ(capped.tokens(), 10.0);
}

TEST(RetryBudget, RetriesAreARatioOfRequests) {
  ManualClock clock;
  Budget budget({.ratio = 0.2, .min_retries_per_second = 0, .max_tokens = 100}, clock);
  EXPECT_FALSE(budget.try_withdraw());  // no request yet, no floor
  for (int i = 0; i < 4; ++i) budget.deposit();
  EXPECT_FALSE(budget.try_withdraw()) << "4 x 0.2 < 1";
  budget.deposit();
  auto ticket = budget.try_withdraw();
  ASSERT_TRUE(ticket);
  ticket->commit();
  EXPECT_FALSE(budget.try_withdraw());

  // Steady state of a storm: 1000 requests allow exactly 200 retries.
  int granted = 0;
  for (int i = 0; i < 1000; ++i) {
    budget.deposit();
    if (auto t = budget.try_withdraw()) t->commit(), ++granted;
  }
  EXPECT_EQ(granted, 200);
  const auto snap = budget.snapshot();
  EXPECT_EQ(snap.withdrawn, 201u);
  EXPECT_EQ(snap.rejected, 803u);
}

TEST(RetryBudget, SavingsAreCapped) {
  ManualClock clock;
  Budget budget({.ratio = 0.5, .min_retries_per_second = 0, .max_tokens = 5}, clock);
  for (int i = 0; i < 1000; ++i) budget.deposit();
  EXPECT_DOUBLE_EQ(budget.tokens(), 5.0);
  int granted = 0;
  while (auto t = budget.try_withdraw()) t->commit(), ++granted;
  EXPECT_EQ(granted, 5);
}

TEST(RetryBudget, FloorAccruesWithTimeLazily) {
  ManualClock clock;
  Budget budget({.ratio = 0, .min_retries_per_second = 2, .max_tokens = 4}, clock);
  while (auto t = budget.try_withdraw()) t->commit();
  EXPECT_LT(budget.tokens(), 1.0);
  clock.advance(499ms);
  EXPECT_FALSE(budget.try_withdraw());
  clock.advance(1ms);  // 2 per second: one more after 500 ms
  auto t = budget.try_withdraw();
  ASSERT_TRUE(t);
  t->commit();
  clock.advance(1h);  // a long quiet period saves at most max_tokens
  EXPECT_DOUBLE_EQ(budget.tokens(), 4.0);
}

TEST(RetryBudget, ClockSteppingBackIsNoTimePassing) {
  ManualClock clock(ManualClock::time_point(10s));
  Budget budget({.ratio = 0, .min_retries_per_second = 1, .max_tokens = 10}, clock);
  while (auto t = budget.try_withdraw()) t->commit();
  clock.set(1s);
  EXPECT_FALSE(budget.try_withdraw());
  clock.set(10s);
  EXPECT_FALSE(budget.try_withdraw());
}

TEST(RetryBudget, UnusedTicketIsRefunded) {
  ManualClock clock;
  Budget budget({.ratio = 1, .min_retries_per_second = 0, .max_tokens = 10}, clock);
  budget.deposit();
  {
    auto t = budget.try_withdraw();
    ASSERT_TRUE(t);
    EXPECT_FALSE(budget.try_withdraw()) << "a retry waiting in backoff holds its token";
  }  // cancelled during backoff: never started
  EXPECT_DOUBLE_EQ(budget.tokens(), 1.0);
  const auto snap = budget.snapshot();
  EXPECT_EQ(snap.refunded, 1u);
  EXPECT_EQ(snap.withdrawn, 0u);

  auto t = budget.try_withdraw();
  ASSERT_TRUE(t);
  auto moved = std::move(*t);
  EXPECT_FALSE(t->active());
  moved.commit();
  EXPECT_FALSE(moved.active());
  EXPECT_LT(budget.tokens(), 1.0);
}

TEST(RetryBudget, ValidationNamesTheField) {
  auto field = [](RetryBudgetConfig c) {
    auto r = validate(c);
    return r ? std::string() : r.error().field;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(field({.name = ""}), "name");
  EXPECT_EQ(field({.ratio = -0.1}), "ratio");
  EXPECT_EQ(field({.ratio = nan}), "ratio");
  EXPECT_EQ(field({.min_retries_per_second = -1}), "min_retries_per_second");
  EXPECT_EQ(field({.min_retries_per_second = std::numeric_limits<double>::infinity()}),
            "min_retries_per_second");
  EXPECT_EQ(field({.max_tokens = 0.5}), "max_tokens");
  EXPECT_EQ(field({.max_tokens = 1e13}), "max_tokens");
  EXPECT_EQ(field({}), "");
#if defined(__cpp_exceptions)
  ManualClock clock;
  try {
    Budget b({.name = "payments", .ratio = -1}, clock);
    FAIL() << "accepted a negative ratio";
  } catch (const InvalidConfig& e) {
    EXPECT_EQ(e.error().field, "ratio");
    EXPECT_EQ(e.error().component, "retry budget 'payments'");
  }
#endif
}

// Many threads deposit, withdraw and refund at once: retries granted never exceed
// what the deposits paid for, and no token is lost or made up.
TEST(RetryBudget, ConcurrentUseNeverOverspends) {
  RetryBudget budget({.ratio = 0.25, .min_retries_per_second = 0, .max_tokens = 1e6});
  constexpr int kThreads = 4, kRequests = 20000;
  std::atomic<int> granted{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kRequests; ++i) {
          budget.deposit();
          for (int r = 0; r < 3; ++r) {
            if (auto ticket = budget.try_withdraw()) {
              if (r == 2) continue;  // dropped: refunded
              ticket->commit();
              granted.fetch_add(1, std::memory_order_relaxed);
            }
          }
        }
      });
    }
  }
  EXPECT_LE(granted.load(), kThreads * kRequests / 4);
  // Tokens are conserved: every deposit is either spent or still in the balance.
  EXPECT_DOUBLE_EQ(granted.load() + budget.tokens(), kThreads * kRequests / 4.0);
}

}  // namespace
}  // namespace bulwark
