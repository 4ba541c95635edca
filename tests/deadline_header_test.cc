// The deadline header: every unit, the margin, truncation on writing, and every
// malformed form named by its error.

#include "bulwark/deadline_header.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace bulwark {
namespace {

using namespace std::chrono_literals;
using E = DeadlineHeaderError;

Nanos ok(std::string_view v, DeadlineHeaderFormat f = DeadlineHeaderFormat::grpc_timeout) {
  auto r = parse_timeout_header(v, f);
  EXPECT_TRUE(r) << v;
  return r ? *r : Nanos(-1);
}
E bad(std::string_view v, DeadlineHeaderFormat f = DeadlineHeaderFormat::grpc_timeout) {
  auto r = parse_timeout_header(v, f);
  EXPECT_FALSE(r) << v;
  return r ? E::empty : r.error();
}

TEST(DeadlineHeader, EveryUnit) {
  EXPECT_EQ(ok("850m"), 850ms);
  EXPECT_EQ(ok("2H"), 2h);
  EXPECT_EQ(ok("3M"), 3min);
  EXPECT_EQ(ok("30S"), 30s);
  EXPECT_EQ(ok("1500u"), 1500us);
  EXPECT_EQ(ok("7n"), 7ns);
  EXPECT_EQ(ok("2562047H"), 2562047h);  // the largest a Nanos holds (about 292 years)
  EXPECT_EQ(ok("00000001S"), 1s);
  EXPECT_EQ(ok(" \t850m "), 850ms);  // surrounding whitespace
  EXPECT_EQ(ok("0m"), 0ns);          // no time left: valid, expired at once
  EXPECT_EQ(ok("850", DeadlineHeaderFormat::milliseconds), 850ms);
}

TEST(DeadlineHeader, MalformedFormsAreNamed) {
  EXPECT_EQ(bad(""), E::empty);
  EXPECT_EQ(bad("  "), E::empty);
  EXPECT_EQ(bad("-5m"), E::negative);
  EXPECT_EQ(bad("m"), E::not_a_number);
  EXPECT_EQ(bad("abc"), E::not_a_number);
  EXPECT_EQ(bad("+5m"), E::not_a_number);
  EXPECT_EQ(bad("1.5S"), E::not_a_number);
  EXPECT_EQ(bad("123456789m"), E::too_many_digits);
  EXPECT_EQ(bad("000000000n"), E::too_many_digits);
  EXPECT_EQ(bad("850"), E::missing_unit);
  EXPECT_EQ(bad("2562048H"), E::too_large);
  EXPECT_EQ(bad("99999999H"), E::too_large);
  EXPECT_EQ(bad("850x"), E::unknown_unit);
  EXPECT_EQ(bad("850s"), E::unknown_unit);  // seconds are 'S'
  EXPECT_EQ(bad("850ms"), E::unknown_unit);
  EXPECT_EQ(bad("850 m"), E::unknown_unit);
  EXPECT_EQ(bad("850mm"), E::unknown_unit);
  EXPECT_EQ(bad("850m", DeadlineHeaderFormat::milliseconds), E::not_a_number);
  EXPECT_EQ(bad("123456789", DeadlineHeaderFormat::milliseconds), E::too_many_digits);
  EXPECT_EQ(to_string(E::too_many_digits), "more than 8 digits");
  EXPECT_EQ(to_string(E::unknown_unit), "unknown unit (H, M, S, m, u or n)");
}

TEST(DeadlineHeader, DeadlineIsNowPlusTimeoutLessMargin) {
  const Ticks now = 1'000'000'000;
  auto d = parse_deadline_header("850m", 50ms, now);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->ticks(), now + Nanos(800ms).count());
  // A margin above the timeout leaves the deadline at now: expired, never in the past.
  auto none = parse_deadline_header("10m", 50ms, now);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->ticks(), now);
  EXPECT_TRUE(none->passed(now));
  // The largest value is still a finite deadline, so it never reads as "never".
  auto far = parse_deadline_header("2562047H", 0ns, now);
  ASSERT_TRUE(far);
  EXPECT_FALSE(far->is_never());
  auto err = parse_deadline_header("12x", 0ns, now);
  ASSERT_FALSE(err);
  EXPECT_EQ(err.error(), E::unknown_unit);
}

TEST(DeadlineHeader, ServersOwnDeadlineIsNeverExtended) {
  ManualClock clock;
  const auto own = BasicContext<ManualClock>(clock).with_timeout(1s);
  const auto longer = parse_deadline_header("5S", 0ns, now_ticks(clock));
  const auto shorter = parse_deadline_header("300m", 0ns, now_ticks(clock));
  ASSERT_TRUE(longer && shorter);
  EXPECT_EQ(own.with_deadline(*longer).remaining(), 1s);
  EXPECT_EQ(own.with_deadline(*shorter).remaining(), 300ms);
}

TEST(DeadlineHeader, FormatTruncatesAndRoundTrips) {
  EXPECT_EQ(format_timeout_header(850ms), "850m");
  EXPECT_EQ(format_timeout_header(850ms + 999us), "850m");  // truncated, never rounded up
  EXPECT_EQ(format_timeout_header(999us), "999u");
  EXPECT_EQ(format_timeout_header(999ns), "999n");
  EXPECT_EQ(format_timeout_header(Nanos(-5)), "0n");
  EXPECT_EQ(format_timeout_header(30h), "108000S");  // 1.08e8 ms: over 8 digits
  EXPECT_EQ(format_timeout_header(Nanos::max()), "2562047H");
  EXPECT_EQ(format_timeout_header(850ms, DeadlineHeaderFormat::milliseconds), "850");
  for (const Nanos d : {Nanos(0), Nanos(1), Nanos(999'999), Nanos(1'234'567'891),
                        Nanos(std::chrono::hours(100)), Nanos(std::chrono::hours(1'000'000))}) {
    auto back = parse_timeout_header(format_timeout_header(d));
    ASSERT_TRUE(back) << d.count();
    EXPECT_LE(*back, d);                                       // never later
    EXPECT_GE(*back, d - std::min(d, d / 1000 + Nanos(1ms)));  // and close
  }
}

}  // namespace
}  // namespace bulwark
