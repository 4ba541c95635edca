#include "bulwark/backoff.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

namespace bulwark {
namespace {

using namespace std::chrono_literals;

std::vector<Nanos> first(const Backoff& b, int n) {
  std::vector<Nanos> out;
  for (int i = 1; i <= n; ++i) out.push_back(b.base_delay(static_cast<std::uint32_t>(i)));
  return out;
}

TEST(Backoff, ExponentialSequenceIsExact) {
  const auto b = Backoff::exponential(100ms, 2.0, 1s);
  EXPECT_EQ(first(b, 6), (std::vector<Nanos>{100ms, 200ms, 400ms, 800ms, 1s, 1s}));
  const auto grpc = Backoff::exponential(1s, 1.6, 120s);  // gRPC's defaults
  EXPECT_EQ(first(grpc, 3), (std::vector<Nanos>{1s, 1600ms, 2560ms}));
}

TEST(Backoff, ConstantAndCustom) {
  EXPECT_EQ(first(Backoff::constant(250ms), 3), (std::vector<Nanos>{250ms, 250ms, 250ms}));
  const auto linear = Backoff::custom([](std::uint32_t n) { return Nanos(n * 10ms); }, 25ms);
  EXPECT_EQ(first(linear, 4), (std::vector<Nanos>{10ms, 20ms, 25ms, 25ms}));
  const auto negative = Backoff::custom([](std::uint32_t) { return Nanos(-5s); });
  EXPECT_EQ(negative.base_delay(1), Nanos::zero());
}

TEST(Backoff, HugeAttemptCountsSaturateAtTheCap) {
  const std::uint32_t huge[] = {63,   64,       65,
                                1000, 1u << 20, std::numeric_limits<std::uint32_t>::max()};
  for (const double multiplier : {1.5, 2.0, 10.0, 1e300}) {
    const auto b = Backoff::exponential(1ms, multiplier, 30s);
    for (const std::uint32_t n : huge) {
      EXPECT_EQ(b.base_delay(n), 30s) << "multiplier " << multiplier << " attempt " << n;
    }
  }
  // Even with no real cap, the delay saturates instead of wrapping negative or to 0.
  const auto uncapped = Backoff::exponential(1ms, 2.0, Nanos::max());
  for (const std::uint32_t n : huge) EXPECT_EQ(uncapped.base_delay(n), Nanos::max()) << n;
  // A multiplier of exactly 1 stays at the initial delay for ever.
  EXPECT_EQ(
      Backoff::exponential(7ms, 1.0, 1s).base_delay(std::numeric_limits<std::uint32_t>::max()),
      7ms);
  // Attempt 0 is read as attempt 1.
  EXPECT_EQ(Backoff::exponential(7ms, 2.0, 1s).base_delay(0), 7ms);
}

// At huge attempt counts the base delay is the cap, so each jitter must stay within
// its documented bounds around the cap (backoff.h): full in [0, cap], equal in
// [cap/2, cap], decorrelated in [initial, min(cap, 3 * max(previous, initial))]. Both
// a real cap and no cap at all (Nanos::max(), where d/2 and 3 * previous are closest
// to overflowing), and for decorrelated every kind of previous delay.
TEST(Backoff, JitteredHugeAttemptsStayInRange) {
  const std::uint32_t huge[] = {64, 1000, std::numeric_limits<std::uint32_t>::max()};
  const Nanos initial = 1ms;
  for (const Nanos cap : {Nanos(30s), Nanos::max()}) {
    SplitMix64 rng(1);
    const auto full = Backoff::exponential(initial, 2.0, cap).with_jitter(Jitter::full);
    const auto equal = Backoff::exponential(initial, 2.0, cap).with_jitter(Jitter::equal);
    const auto decorrelated =
        Backoff::exponential(initial, 2.0, cap).with_jitter(Jitter::decorrelated);
    // min(cap, 3 * max(previous, initial)), without overflowing: p > cap / 3 means
    // 3 * p > cap.
    auto decorrelated_hi = [&](Nanos previous) {
      const Nanos p = std::max(previous, initial);
      return p > cap / 3 ? cap : std::min(cap, p * 3);
    };
    const Nanos previous_delays[] = {Nanos::zero(), initial, 7s,  cap / 3 - 1ns, cap / 3,
                                     cap / 3 + 1ns, cap / 2, cap, Nanos::max()};
    for (const std::uint32_t n : huge) {
      ASSERT_EQ(full.base_delay(n), cap);
      for (int i = 0; i < 1000; ++i) {
        const Nanos f = full.delay(n, Nanos::zero(), rng());
        EXPECT_GE(f, Nanos::zero()) << "full, attempt " << n;
        EXPECT_LE(f, cap) << "full, attempt " << n;
        const Nanos e = equal.delay(n, Nanos::zero(), rng());
        EXPECT_GE(e, cap / 2) << "equal, attempt " << n;
        EXPECT_LE(e, cap) << "equal, attempt " << n;
      }
      for (const Nanos previous : previous_delays) {
        for (int i = 0; i < 100; ++i) {
          const Nanos d = decorrelated.delay(n, previous, rng());
          EXPECT_GE(d, initial) << "decorrelated, previous " << previous.count() << "ns";
          EXPECT_LE(d, decorrelated_hi(previous))
              << "decorrelated, previous " << previous.count() << "ns";
        }
        // All-ones bits draw the top of the range: exactly the bound, not 1 ns past it.
        EXPECT_EQ(decorrelated.delay(n, previous, ~std::uint64_t{0}), decorrelated_hi(previous))
            << "decorrelated, previous " << previous.count() << "ns";
      }
    }
    // The bounds are reached, not just respected: draws of all-zero and all-one bits
    // land on the ends of each range.
    const std::uint32_t n = huge[2];
    EXPECT_EQ(full.delay(n, Nanos::zero(), 0), Nanos::zero());
    EXPECT_EQ(full.delay(n, Nanos::zero(), ~std::uint64_t{0}), cap);
    EXPECT_EQ(equal.delay(n, Nanos::zero(), 0), cap / 2);
    EXPECT_EQ(equal.delay(n, Nanos::zero(), ~std::uint64_t{0}), cap);
    EXPECT_EQ(decorrelated.delay(n, Nanos::max(), 0), initial);
    EXPECT_EQ(decorrelated.delay(n, Nanos::max(), ~std::uint64_t{0}), cap);
  }
}

TEST(Backoff, NoJitterIgnoresRandomness) {
  const auto b = Backoff::exponential(100ms, 2.0, 1s);
  EXPECT_EQ(b.delay(3, 0ms, 0), 400ms);
  EXPECT_EQ(b.delay(3, 0ms, ~std::uint64_t{0}), 400ms);
}

// Over many seeded draws: every delay within its bounds, and the draws actually
// spread over the range (both ends are approached), so a jitter that returned a
// constant would fail.
TEST(Backoff, FullJitterBounds) {
  const auto b = Backoff::exponential(100ms, 2.0, 1s).with_jitter(Jitter::full);
  SplitMix64 rng(42);
  Nanos lo = Nanos::max(), hi = Nanos::zero();
  for (int i = 0; i < 20000; ++i) {
    const Nanos d = b.delay(3, 0ms, rng());
    ASSERT_GE(d, 0ms);
    ASSERT_LE(d, 400ms);
    lo = std::min(lo, d), hi = std::max(hi, d);
  }
  EXPECT_LT(lo, 5ms);
  EXPECT_GT(hi, 395ms);
}

TEST(Backoff, EqualJitterBounds) {
  const auto b = Backoff::exponential(100ms, 2.0, 1s).with_jitter(Jitter::equal);
  SplitMix64 rng(7);
  Nanos lo = Nanos::max(), hi = Nanos::zero();
  for (int i = 0; i < 20000; ++i) {
    const Nanos d = b.delay(4, 0ms, rng());
    ASSERT_GE(d, 400ms);
    ASSERT_LE(d, 800ms);
    lo = std::min(lo, d), hi = std::max(hi, d);
  }
  EXPECT_LT(lo, 405ms);
  EXPECT_GT(hi, 795ms);
}

TEST(Backoff, DecorrelatedJitterBounds) {
  const auto b = Backoff::exponential(100ms, 2.0, 2s).with_jitter(Jitter::decorrelated);
  SplitMix64 rng(9);
  Nanos previous = 0ms;
  bool reached_cap_region = false;
  for (int i = 0; i < 20000; ++i) {
    const Nanos d = b.delay(static_cast<std::uint32_t>(i % 10 + 1), previous, rng());
    ASSERT_GE(d, 100ms);
    ASSERT_LE(d, std::min<Nanos>(2s, std::max<Nanos>(previous, 100ms) * 3));
    reached_cap_region |= d > 1900ms;
    previous = d;
  }
  EXPECT_TRUE(reached_cap_region);
}

TEST(Backoff, SameSeedSameSequence) {
  const auto b = Backoff::exponential(10ms, 2.0, 10s).with_jitter(Jitter::full);
  SplitMix64 a(123), c(123);
  for (std::uint32_t n = 1; n < 50; ++n) EXPECT_EQ(b.delay(n, 0ms, a()), b.delay(n, 0ms, c()));
}

TEST(Backoff, UniformBetweenEdges) {
  EXPECT_EQ(uniform_between(5ms, 5ms, 12345), 5ms);
  EXPECT_EQ(uniform_between(5ms, 1ms, 12345), 5ms);
  EXPECT_EQ(uniform_between(0ms, 10ms, 0), 0ms);
  EXPECT_EQ(uniform_between(0ms, 10ms, ~std::uint64_t{0}), 10ms);
  EXPECT_EQ(uniform_between(Nanos::zero(), Nanos::max(), ~std::uint64_t{0}), Nanos::max());
}

TEST(Backoff, ValidationNamesTheField) {
  auto field = [](const Backoff& b) {
    auto r = b.validate("retry 'x'", "backoff");
    return r ? std::string() : r.error().field;
  };
  EXPECT_EQ(field(Backoff::exponential(0ms, 2.0, 1s)), "backoff.initial");
  EXPECT_EQ(field(Backoff::exponential(1ms, 0.5, 1s)), "backoff.multiplier");
  EXPECT_EQ(field(Backoff::exponential(1ms, std::numeric_limits<double>::infinity(), 1s)),
            "backoff.multiplier");
  EXPECT_EQ(field(Backoff::exponential(1ms, std::numeric_limits<double>::quiet_NaN(), 1s)),
            "backoff.multiplier");
  EXPECT_EQ(field(Backoff::exponential(2s, 2.0, 1s)), "backoff.max");
  EXPECT_EQ(field(Backoff::constant(-1ms)), "backoff.delay");
  EXPECT_EQ(field(Backoff::custom(nullptr)), "backoff.function");
  EXPECT_EQ(field(Backoff::constant(0ms)), "");
  EXPECT_EQ(field(Backoff::exponential(1ms, 1.0, 1ms)), "");
}

}  // namespace
}  // namespace bulwark
