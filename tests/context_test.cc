#include "bulwark/context.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stop_token>

namespace bulwark {
namespace {

using namespace std::chrono_literals;

TEST(Deadline, DefaultsToNever) {
  Deadline d;
  EXPECT_TRUE(d.is_never());
  EXPECT_EQ(d, Deadline::never());
  EXPECT_FALSE(d.passed(kTicksMax - 1));
  EXPECT_EQ(d.remaining(0), Nanos::max());
}

TEST(Deadline, AfterSaturatesInsteadOfOverflowing) {
  ManualClock clock;
  clock.set(std::chrono::nanoseconds(kTicksMax - 10));
  const Deadline d = Deadline::after(clock, 1h);
  EXPECT_EQ(d.ticks(), kTicksMax);
  EXPECT_TRUE(Deadline::after(clock, std::chrono::hours::max()).is_never());
  // A negative timeout is "already due", not a time in the past that wraps around.
  clock.set(0s);
  EXPECT_EQ(Deadline::after(clock, -5s).ticks(), 0);
}

TEST(Deadline, RemainingIsNeverNegative) {
  const Deadline d = Deadline::at(1000);
  EXPECT_EQ(d.remaining(400), Nanos(600));
  EXPECT_EQ(d.remaining(1000), Nanos::zero());
  EXPECT_EQ(d.remaining(kTicksMax), Nanos::zero());
  EXPECT_EQ(Deadline::at(kTicksMin + 1).remaining(kTicksMax), Nanos::zero());
  EXPECT_FALSE(d.passed(999));
  EXPECT_TRUE(d.passed(1000));
}

TEST(Context, ChildrenCanOnlyShortenTheDeadline) {
  ManualClock clock;
  BasicContext<ManualClock> request(clock, {}, Deadline::after(clock, 2s));
  auto attempt = request.with_timeout(800ms);
  EXPECT_EQ(attempt.remaining(), 800ms);
  auto longer = request.with_timeout(5s);  // cannot outlive the request
  EXPECT_EQ(longer.remaining(), 2s);
  EXPECT_EQ(request.with_deadline(Deadline::never()).deadline(), request.deadline());

  clock.advance(1500ms);  // 1.5 s of 2 s spent, the next call has 500 ms
  EXPECT_EQ(request.remaining(), 500ms);
  EXPECT_EQ(request.with_timeout(800ms).remaining(), 500ms);
  EXPECT_TRUE(attempt.expired());
  EXPECT_FALSE(request.expired());
  clock.advance(500ms);
  EXPECT_TRUE(request.expired());
  EXPECT_EQ(request.remaining(), Nanos::zero());
}

TEST(Context, DefaultHasNoDeadlineAndNoCancellation) {
  Context ctx;
  EXPECT_FALSE(ctx.has_deadline());
  EXPECT_EQ(ctx.remaining(), Nanos::max());
  EXPECT_FALSE(ctx.expired());
  EXPECT_FALSE(ctx.stop_requested());
  EXPECT_FALSE(ctx.stop_token().stop_possible());
  EXPECT_EQ(ctx.attempt(), 1u);
  EXPECT_TRUE(ctx.idempotency_key().empty());
  static_assert(sizeof(Context) <= 3 * sizeof(void*), "SteadyClock costs no storage");
}

TEST(Context, ChildrenShareCancellation) {
  ManualClock clock;
  std::stop_source source;
  BasicContext<ManualClock> request(clock, source.get_token());
  auto child = request.with_timeout(1s).with_deadline(Deadline::at(5));
  EXPECT_FALSE(child.stop_requested());
  source.request_stop();
  EXPECT_TRUE(request.stop_requested());
  EXPECT_TRUE(child.stop_requested());
}

TEST(Context, CarriesAttemptInformation) {
  ManualClock clock;
  BasicContext<ManualClock> ctx(clock);
  const AttemptInfo info{3, "op-42"};
  auto a = ctx.with_attempt(&info).with_timeout(1s);
  EXPECT_EQ(a.attempt(), 3u);
  EXPECT_EQ(a.idempotency_key(), "op-42");
}

}  // namespace
}  // namespace bulwark
