#include "bulwark/throttle.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Throttle = BasicThrottle<ManualClock>;

ThrottleConfig config(std::uint64_t seed = 42) {
  ThrottleConfig c;
  c.name = "search";
  c.seed = seed;
  return c;  // K = 2, 2 minutes in 12 buckets of 10 s
}

TEST(Throttle, NeverRejectsWhileTheDependencyAccepts) {
  ManualClock clock;
  Throttle t(config(), clock);
  for (int i = 0; i < 100000; ++i) {
    ASSERT_TRUE(t.try_acquire()) << i;
    t.record(true);
    if (i % 1000 == 0) clock.advance(1s);
  }
  EXPECT_EQ(t.reject_probability(), 0.0);
  EXPECT_EQ(t.snapshot().throttled, 0u);
}

TEST(Throttle, ProbabilityFollowsTheFormula) {
  ManualClock clock;
  Throttle t(config(), clock);
  for (int i = 0; i < 1000; ++i) t.record(i < 100);
  // (1000 − 2·100) / 1001
  EXPECT_DOUBLE_EQ(t.reject_probability(), 800.0 / 1001.0);
  const auto s = t.snapshot();
  EXPECT_EQ(s.requests, 1000u);
  EXPECT_EQ(s.accepts, 100u);
  for (int i = 0; i < 500; ++i) t.record(true);  // 1500 requests, 600 accepts
  EXPECT_DOUBLE_EQ(t.reject_probability(), 300.0 / 1501.0);
  for (int i = 0; i < 500; ++i) t.record(true);  // 2000 requests, 1100 accepts: 2·1100 > 2000
  EXPECT_EQ(t.reject_probability(), 0.0);
}

// Rejections drawn with a fixed seed match the probabilities they were drawn with.
// Each call rejects with the probability p_i read just before it (the same clock
// reading, so the same window), and p_i moves as rejections add requests. The sum of
// (rejected_i − p_i) is then a martingale with steps in [−1, 1], so by Azuma's
// inequality P(|R − Σp_i| ≥ a) ≤ 2·exp(−a² / 2n). With a = sqrt(2n·ln(2/1e-12)) that
// is at most 1e-12 for any seed: the bound holds for every seed anyone would try, and
// the seed only makes this run reproducible.
TEST(Throttle, RejectsWithTheRuleProbabilityOverManyCalls) {
  ManualClock clock;
  Throttle t(config(), clock);
  for (int i = 0; i < 5000; ++i) t.record(i % 4 == 0);  // p starts at (5000 − 2500)/5001 ≈ 0.5
  constexpr int kCalls = 200000;
  double expected = 0;
  std::uint64_t rejected = 0;
  std::uint64_t admitted = 0;
  for (int i = 0; i < kCalls; ++i) {
    const double p = t.reject_probability();
    expected += p;
    if (!t.try_acquire()) {
      ++rejected;
    } else {
      t.record(admitted++ % 2 == 0);  // the dependency accepts half of what it gets
    }
  }
  const double a = std::sqrt(2.0 * kCalls * std::log(2.0 / 1e-12));
  EXPECT_NEAR(static_cast<double>(rejected), expected, a);
  EXPECT_EQ(t.snapshot().throttled, rejected);
  // With half accepted, requests − 2·accepts grows as fast as requests: p stays near
  // its starting 0.5, far from rejecting nothing or everything.
  EXPECT_GT(rejected, kCalls / 4);
  EXPECT_LT(rejected, kCalls * 3 / 4);
}

TEST(Throttle, RecoversAsTheWindowSlidesPastTheOverload) {
  ManualClock clock;
  Throttle t(config(), clock);
  for (int i = 0; i < 1000; ++i) t.record(false);  // all in the bucket [0 s, 10 s)
  EXPECT_NEAR(t.reject_probability(), 1000.0 / 1001.0, 1e-12);
  clock.advance(119s);  // bucket 11: bucket 0 is still in the window
  EXPECT_NEAR(t.reject_probability(), 1000.0 / 1001.0, 1e-12);
  clock.advance(1s);  // bucket 12 reuses slot 0: the overload has left the window
  EXPECT_EQ(t.reject_probability(), 0.0);
  EXPECT_TRUE(t.try_acquire());
  t.record(true);
  EXPECT_EQ(t.snapshot().requests, 1u);  // the stale slot was reset, not added to
}

TEST(Throttle, AcceptsBringTheProbabilityDown) {
  ManualClock clock;
  Throttle t(config(), clock);
  for (int i = 0; i < 200; ++i) t.record(false);
  double before = t.reject_probability();
  for (int round = 0; round < 9; ++round) {  // 200 + 20k requests, 20k accepts
    for (int i = 0; i < 20; ++i) t.record(true);
    const double now = t.reject_probability();
    EXPECT_LT(now, before) << round;
    before = now;
  }
  EXPECT_GT(before, 0.0);
  for (int i = 0; i < 200; ++i) t.record(true);  // 580 requests, 380 accepts
  EXPECT_EQ(t.reject_probability(), 0.0);
}

TEST(Throttle, DefaultClassifierCountsOverloadAsNotAccepted) {
  struct Plain {};
  struct Pushback {
    std::optional<Nanos> retry_after() const { return 2s; }
  };
  struct Shed {
    bool overloaded() const { return true; }
  };
  ThrottleAccepts accepts;
  Failure<Plain> plain;
  plain.error = Plain{};
  EXPECT_TRUE(accepts(plain));
  plain.timed_out = true;
  EXPECT_FALSE(accepts(plain));
  Failure<Pushback> pushback;
  pushback.error = Pushback{};
  EXPECT_FALSE(accepts(pushback));
  Failure<Shed> shed;
  shed.error = Shed{};
  EXPECT_FALSE(accepts(shed));
}

TEST(Throttle, InvalidConfigNamesTheField) {
  auto field = [](ThrottleConfig c) {
    auto v = validate(c);
    return v ? std::string() : v.error().field;
  };
  EXPECT_EQ(field(config()), "");
  auto c = config();
  c.k = 0.5;
  EXPECT_EQ(field(c), "k");
  c.k = std::nan("");
  EXPECT_EQ(field(c), "k");
  c = config();
  c.buckets = 0;
  EXPECT_EQ(field(c), "buckets");
  c = config();
  c.window = Nanos(3);
  EXPECT_EQ(field(c), "window");
  c = config();
  c.name = "";
  EXPECT_EQ(field(c), "name");
#if defined(__cpp_exceptions)
  c = config();
  c.k = 0;
  ManualClock clock;
  EXPECT_THROW((void)Throttle(c, clock), InvalidConfig);
#endif
}

}  // namespace
}  // namespace bulwark
