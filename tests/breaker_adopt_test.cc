// adopt_open / adopt_close: a breaker taking a decision made elsewhere, in virtual time.

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "bulwark/circuit_breaker.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Breaker = BasicCircuitBreaker<ManualClock>;
using WindowBreaker = BasicCircuitBreaker<ManualClock, CountWindow>;

struct Seen {
  State from, to;
  TransitionReason reason;
  Ticks at;
  Nanos open_duration;
};

// The only place these tests build a breaker configuration.
Breaker::Config config() {
  return Breaker::Config{.name = "dep", .consecutive_failures = 3, .open_duration = 10s};
}

class AdoptTest : public ::testing::Test {
 protected:
  AdoptTest() : policy(config(), clock), breaker(policy) {
    policy.on_transition([this](const TransitionEvent& e) {
      seen.push_back({e.from, e.to, e.reason, e.at, e.open_duration});
    });
  }
  void fail(int n) {
    for (int i = 0; i < n; ++i) breaker.try_acquire()->record_failure();
  }

  ManualClock clock;
  Breaker::Policy policy;
  Breaker breaker;
  std::vector<Seen> seen;
};

TEST_F(AdoptTest, OpenFromClosedLastsTheRemainingPeriodWithTheFleetReason) {
  clock.advance(100s);
  ASSERT_TRUE(breaker.adopt_open(4s));
  EXPECT_EQ(breaker.state(), State::open);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].from, State::closed);
  EXPECT_EQ(seen[0].to, State::open);
  EXPECT_EQ(seen[0].reason, TransitionReason::fleet_opened);
  EXPECT_EQ(to_string(seen[0].reason), "fleet_opened");
  // at + open_duration is the end of the adopted period.
  EXPECT_EQ(seen[0].at + seen[0].open_duration.count(), now_ticks(clock) + to_ticks(4s));

  clock.advance(3999ms);
  auto rejected = breaker.try_acquire();
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.error().reason, RejectReason::open);
  EXPECT_EQ(rejected.error().retry_after, 1ms);
  clock.advance(1ms);
  auto probe = breaker.try_acquire();
  ASSERT_TRUE(probe);
  EXPECT_TRUE(probe->is_probe());
}

TEST_F(AdoptTest, OpenLongerThanTheOpenDurationIsHonoured) {
  ASSERT_TRUE(breaker.adopt_open(25s));
  clock.advance(24s);
  EXPECT_FALSE(breaker.try_acquire());
  clock.advance(1s);
  EXPECT_TRUE(breaker.try_acquire());
}

TEST_F(AdoptTest, OpenMovesTheEndOfAnOpenBreakerSilently) {
  fail(3);
  ASSERT_EQ(breaker.state(), State::open);
  seen.clear();
  clock.advance(9s);
  ASSERT_TRUE(breaker.adopt_open(5s));  // another instance holds the probe: wait longer
  EXPECT_TRUE(seen.empty());            // OPEN stays OPEN: no transition to announce
  clock.advance(4s);
  EXPECT_FALSE(breaker.try_acquire());
  clock.advance(1s);
  EXPECT_TRUE(breaker.try_acquire());
}

TEST_F(AdoptTest, OpenFromHalfOpenEndsTheRoundAndItsProbesCountNowhere) {
  fail(3);
  clock.advance(10s);
  auto probe = breaker.try_acquire();
  ASSERT_TRUE(probe && probe->is_probe());
  ASSERT_TRUE(breaker.adopt_open(2s));
  EXPECT_EQ(breaker.state(), State::open);
  EXPECT_EQ(seen.back().from, State::half_open);
  EXPECT_EQ(seen.back().reason, TransitionReason::fleet_opened);
  probe->record_success();  // that round is over
  EXPECT_EQ(breaker.state(), State::open);
}

TEST_F(AdoptTest, CloseFromOpenAndFromHalfOpen) {
  EXPECT_FALSE(breaker.adopt_close());  // CLOSED already: nothing to do
  fail(3);
  ASSERT_TRUE(breaker.adopt_close());
  EXPECT_EQ(breaker.state(), State::closed);
  EXPECT_EQ(seen.back().from, State::open);
  EXPECT_EQ(seen.back().reason, TransitionReason::fleet_closed);
  EXPECT_EQ(to_string(seen.back().reason), "fleet_closed");
  EXPECT_TRUE(breaker.try_acquire());

  fail(3);
  clock.advance(10s);
  auto probe = breaker.try_acquire();
  ASSERT_TRUE(probe && probe->is_probe());
  ASSERT_TRUE(breaker.adopt_close());
  EXPECT_EQ(seen.back().from, State::half_open);
  probe->record_failure();  // a probe of the finished round reopens nothing
  EXPECT_EQ(breaker.state(), State::closed);
}

TEST_F(AdoptTest, ManualStatesAreLeftAlone) {
  for (State s : {State::forced_open, State::disabled, State::metrics_only}) {
    ASSERT_TRUE(breaker.transition_to(s));
    EXPECT_FALSE(breaker.adopt_open(5s)) << to_string(s);
    EXPECT_FALSE(breaker.adopt_close()) << to_string(s);
    EXPECT_EQ(breaker.state(), s);
  }
}

TEST_F(AdoptTest, AnOpeningAdoptedCountsAsAnOpeningButNotAsFlapping) {
  ASSERT_TRUE(breaker.adopt_open(1s));
  const BreakerSnapshot snap = breaker.snapshot();
  EXPECT_EQ(snap.opens, 1u);
  EXPECT_FALSE(snap.flapping);
  EXPECT_EQ(snap.reopens, 1u);
}

TEST(AdoptWindowTest, WindowedBreakerAdoptsAndRecordsAgainAfterClose) {
  ManualClock clock;
  WindowBreaker b(WindowBreaker::Config{.name = "w", .consecutive_failures = 2}, clock);
  ASSERT_TRUE(b.adopt_open(1s));
  EXPECT_FALSE(b.try_acquire());
  ASSERT_TRUE(b.adopt_close());
  b.try_acquire()->record_failure();
  b.try_acquire()->record_failure();
  EXPECT_EQ(b.state(), State::open);
}

}  // namespace
}  // namespace bulwark
