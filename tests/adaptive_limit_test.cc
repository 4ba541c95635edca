#include "bulwark/adaptive_limit.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using Limit = BasicAdaptiveLimit<ManualClock>;

AdaptiveLimitConfig config(AdaptiveAlgorithm a, std::uint32_t initial = 10) {
  AdaptiveLimitConfig c;
  c.name = "db";
  c.algorithm = a;
  c.min_limit = 2;
  c.max_limit = 40;
  c.initial_limit = initial;
  c.window_samples = 5;
  return c;
}

// One round: as many calls as the limit admits (at most `want`), all taking `rtt`,
// then all completed (or dropped).
void round(Limit& l, ManualClock& clock, Nanos rtt, bool drop = false, std::uint32_t want = 1000) {
  std::vector<Limit::Permit> held;
  for (std::uint32_t i = 0; i < want; ++i) {
    auto p = l.try_acquire();
    if (!p) break;
    held.push_back(std::move(*p));
  }
  clock.advance(rtt);
  for (auto& p : held) drop ? p.drop() : p.complete();
}

void rounds(int n, Limit& l, ManualClock& clock, Nanos rtt, bool drop = false) {
  for (int i = 0; i < n; ++i) round(l, clock, rtt, drop);
}

class EveryAlgorithm : public ::testing::TestWithParam<AdaptiveAlgorithm> {};

TEST_P(EveryAlgorithm, ConvergesUpToTheMaximumWhileLatencyIsFlat) {
  ManualClock clock;
  Limit l(config(GetParam()), clock);
  rounds(2000, l, clock, 10ms);
  EXPECT_EQ(l.limit(), 40u);
  EXPECT_EQ(l.in_flight(), 0u);
  EXPECT_GT(l.snapshot().windows, 100u);
}

// Gradient2 keeps its queue_size of headroom: under drops alone it settles where
// limit / 2 + queue_size = limit, at 2 × queue_size (8 here).
TEST_P(EveryAlgorithm, BacksOffWhenCallsAreDropped) {
  ManualClock clock;
  Limit l(config(GetParam(), 30), clock);
  rounds(500, l, clock, 10ms, /*drop=*/true);
  EXPECT_EQ(l.limit(), GetParam() == AdaptiveAlgorithm::gradient2 ? 8u : 2u);
  const auto s = l.snapshot();
  EXPECT_GE(s.dropped, s.windows * 5);  // and the last window still open
  EXPECT_LT(s.dropped, s.windows * 5 + 5);
}

TEST_P(EveryAlgorithm, BacksOffWhenLatencyGrows) {
  if (GetParam() == AdaptiveAlgorithm::aimd) GTEST_SKIP() << "AIMD reacts to drops and timeouts";
  ManualClock clock;
  auto c = config(GetParam(), 10);
  c.vegas.probe_every = 100000;  // a re-probe would accept the slower round trip
  Limit l(c, clock);
  rounds(300, l, clock, 10ms);
  const std::uint32_t before = l.limit();
  ASSERT_EQ(before, 40u);
  rounds(40, l, clock, 40ms);
  EXPECT_LT(l.limit(), before);
}

TEST_P(EveryAlgorithm, DoesNotGrowWhileTheLimitIsNotUsed) {
  ManualClock clock;
  Limit l(config(GetParam(), 10), clock);
  for (int i = 0; i < 500; ++i) {
    auto p = l.try_acquire();  // one call at a time: the limit of 10 is never near
    ASSERT_TRUE(p);
    clock.advance(10ms);
    p->complete();
  }
  EXPECT_EQ(l.limit(), 10u);
}

TEST_P(EveryAlgorithm, CancelledPermitsAreIgnored) {
  ManualClock clock;
  Limit l(config(GetParam()), clock);
  for (int i = 0; i < 100; ++i) {
    auto p = l.try_acquire();
    ASSERT_TRUE(p);
    if (i % 2) p->cancel();  // and the others are destroyed unsettled
  }
  const auto s = l.snapshot();
  EXPECT_EQ(s.windows, 0u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.limit, 10u);
}

INSTANTIATE_TEST_SUITE_P(AdaptiveLimit, EveryAlgorithm,
                         ::testing::Values(AdaptiveAlgorithm::aimd, AdaptiveAlgorithm::vegas,
                                           AdaptiveAlgorithm::gradient2),
                         [](const auto& p) { return std::string(to_string(p.param)); });

TEST(AdaptiveLimit, AdmitsUpToTheLimitAndCountsRejections) {
  ManualClock clock;
  Limit l(config(AdaptiveAlgorithm::aimd, 3), clock);
  auto a = l.try_acquire(), b = l.try_acquire(), c = l.try_acquire();
  ASSERT_TRUE(a && b && c);
  auto d = l.try_acquire();
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().limit, 3u);
  a->complete();
  EXPECT_TRUE(l.try_acquire());
  const auto s = l.snapshot();
  EXPECT_EQ(s.in_flight, 2u);
  EXPECT_EQ(s.rejected, 1u);
}

TEST(AdaptiveLimit, AimdTreatsAWindowSlowerThanItsTimeoutAsADrop) {
  ManualClock clock;
  auto c = config(AdaptiveAlgorithm::aimd, 20);
  c.aimd.timeout = 100ms;
  Limit l(c, clock);
  round(l, clock, 200ms);  // 20 calls: four windows
  EXPECT_EQ(l.limit(), static_cast<std::uint32_t>(20 * 0.9 * 0.9 * 0.9 * 0.9));
}

TEST(AdaptiveLimit, VegasReprobesTheMinimumRoundTrip) {
  ManualClock clock;
  auto c = config(AdaptiveAlgorithm::vegas, 40);
  c.vegas.probe_every = 5;
  Limit l(c, clock);
  round(l, clock, 10ms, false, 5);  // rtt_min = 10 ms
  rounds(200, l, clock, 50ms);      // slower for good: re-learned, then it grows again
  EXPECT_EQ(l.limit(), 40u);
  c.vegas.probe_every = 1000000;  // never re-probed: the slower round trip keeps it down
  Limit stuck(c, clock);
  round(stuck, clock, 10ms, false, 5);
  rounds(200, stuck, clock, 50ms);
  EXPECT_LT(stuck.limit(), 10u);  // queue = 0.8 × limit stays above alpha
}

TEST(AdaptiveLimit, AWindowClosesOnlyAfterMinWindow) {
  ManualClock clock;
  auto c = config(AdaptiveAlgorithm::aimd, 10);
  c.min_window = 1s;
  Limit l(c, clock);
  rounds(5, l, clock, 10ms);  // 50 samples in 50 ms
  EXPECT_EQ(l.snapshot().windows, 0u);
  clock.advance(1s);
  round(l, clock, 10ms);
  EXPECT_EQ(l.snapshot().windows, 1u);
  EXPECT_EQ(l.limit(), 11u);
}

// Calls that take no time on the clock (a ManualClock, a coarse clock) make a window
// whose mean round trip is zero: Gradient2 divided by it, got NaN, and published a limit
// of 0, refusing every call from then on. A mean is now at least 1 ns.
TEST(AdaptiveLimit, AWindowOfZeroRoundTripsKeepsTheLimitWithinBounds) {
  for (AdaptiveAlgorithm a :
       {AdaptiveAlgorithm::aimd, AdaptiveAlgorithm::vegas, AdaptiveAlgorithm::gradient2}) {
    ManualClock clock;
    auto c = config(a, 2);
    c.window_samples = 1;
    Limit l(c, clock);
    for (int i = 0; i < 50; ++i) {
      auto p = l.try_acquire();
      ASSERT_TRUE(p) << to_string(a) << " call " << i << " limit " << l.limit();
      p->complete();  // no time passed
    }
    EXPECT_GE(l.limit(), 2u) << to_string(a);
  }
}

TEST(AdaptiveLimit, AnExplicitRoundTripIsUsedAsGiven) {
  ManualClock clock;
  auto c = config(AdaptiveAlgorithm::aimd, 10);
  c.aimd.timeout = 100ms;
  Limit l(c, clock);
  std::vector<Limit::Permit> held;
  for (int i = 0; i < 5; ++i) held.push_back(std::move(*l.try_acquire()));
  for (auto& p : held) p.complete(1s);  // no time passed on the clock
  EXPECT_EQ(l.limit(), 9u);
}

TEST(AdaptiveLimit, ListenersHearEveryChangeOfTheLimit) {
  ManualClock clock;
  Limit l(config(AdaptiveAlgorithm::aimd, 10), clock);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> seen;
  const ListenerId id = l.add_listener([&](const AdaptiveLimitEvent& e) {
    EXPECT_EQ(e.name, "db");
    EXPECT_EQ(e.limiter, &l);
    seen.emplace_back(e.from, e.to);
  });
  round(l, clock, 10ms);  // 10 calls: two windows, +1 each
  round(l, clock, 10ms, true);
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> want = {
      {10, 11}, {11, 12}, {12, 10}, {10, 9}};
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(l.remove_listener(id));
  round(l, clock, 10ms, true);
  EXPECT_EQ(seen.size(), want.size());
}

TEST(AdaptiveLimit, PrometheusFamilies) {
  ManualClock clock;
  Limit l(config(AdaptiveAlgorithm::gradient2, 10), clock);
  auto held = l.try_acquire();
  const prometheus::AdaptiveLimitReading r[] = {prometheus::reading(l)};
  std::ostringstream out;
  prometheus::write_adaptive_limits(out, r);
  const std::string text = out.str();
  EXPECT_NE(text.find("# TYPE bulwark_adaptive_limit gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_adaptive_limit{name=\"db\"} 10\n"), std::string::npos) << text;
  EXPECT_NE(text.find("bulwark_adaptive_inflight{name=\"db\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE bulwark_adaptive_rejections_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("bulwark_adaptive_rejections_total{name=\"db\"} 0\n"), std::string::npos);
}

#if defined(__cpp_exceptions)
std::string field_of(AdaptiveLimitConfig c) {
  try {
    static const ManualClock clock;
    Limit l(std::move(c), clock);
  } catch (const InvalidConfig& e) {
    return e.error().field;
  }
  return "";
}

TEST(AdaptiveLimit, InvalidConfigNamesTheField) {
  auto base = [] { return config(AdaptiveAlgorithm::gradient2); };
  auto with = [&](auto edit) {
    AdaptiveLimitConfig c = base();
    edit(c);
    return field_of(std::move(c));
  };
  EXPECT_EQ(field_of(base()), "");
  EXPECT_EQ(with([](auto& c) { c.name = ""; }), "name");
  EXPECT_EQ(with([](auto& c) { c.min_limit = 0; }), "min_limit");
  EXPECT_EQ(with([](auto& c) { c.max_limit = 1; }), "max_limit");
  EXPECT_EQ(with([](auto& c) { c.initial_limit = 41; }), "initial_limit");
  EXPECT_EQ(with([](auto& c) { c.initial_limit = 1; }), "initial_limit");
  EXPECT_EQ(with([](auto& c) { c.window_samples = 0; }), "window_samples");
  EXPECT_EQ(with([](auto& c) { c.min_window = -1ms; }), "min_window");
  EXPECT_EQ(with([](auto& c) { c.min_window = 11s; }), "min_window");
  EXPECT_EQ(with([](auto& c) { c.aimd.backoff_ratio = 1; }), "aimd.backoff_ratio");
  EXPECT_EQ(with([](auto& c) { c.aimd.increase = 0; }), "aimd.increase");
  EXPECT_EQ(with([](auto& c) { c.aimd.timeout = 0ms; }), "aimd.timeout");
  EXPECT_EQ(with([](auto& c) { c.vegas.alpha = 0; }), "vegas.alpha");
  EXPECT_EQ(with([](auto& c) { c.vegas.beta = 2; }), "vegas.beta");
  EXPECT_EQ(with([](auto& c) { c.vegas.probe_every = 0; }), "vegas.probe_every");
  EXPECT_EQ(with([](auto& c) { c.vegas.smoothing = 0; }), "vegas.smoothing");
  EXPECT_EQ(with([](auto& c) { c.gradient2.tolerance = 0.5; }), "gradient2.tolerance");
  EXPECT_EQ(with([](auto& c) { c.gradient2.long_window = 0; }), "gradient2.long_window");
  EXPECT_EQ(with([](auto& c) { c.gradient2.warmup = 0; }), "gradient2.warmup");
  EXPECT_EQ(with([](auto& c) { c.gradient2.queue_size = -1; }), "gradient2.queue_size");
  EXPECT_EQ(with([](auto& c) { c.gradient2.smoothing = 1.5; }), "gradient2.smoothing");
  const auto err = validate([] {
    auto c = config(AdaptiveAlgorithm::aimd);
    c.initial_limit = 50;
    return c;
  }());
  ASSERT_FALSE(err);
  EXPECT_EQ(err.error().to_string(),
            "adaptive limit 'db': initial_limit must be within [min_limit, max_limit] = [2, 40] "
            "(got 50)");
}
#endif

}  // namespace
}  // namespace bulwark
