// Metamorphic tests: transformations of a run that must not change what the breaker
// decides. No model involved: the real breaker is compared with itself.
//  - Time shift: the same sequence with the clock starting at 0, 20 s, 2^40 ns or a
//    random large offset gives the same decisions and the same transitions (at times
//    shifted by the offset). A time window's buckets and the in-flight epochs are
//    aligned to the clock's epoch, so the offset is rounded down to whole ones.
//  - Scaling: multiplying every duration (configuration, clock steps, reported call
//    durations) by k scales every retry_after and transition time by k and changes
//    nothing else (k a power of two when calls in flight are counted, as epochs are).
//  - Idle resets: any number of resets with no call in between (thousands) leave an
//    empty window that records the next call.
// Sequences here never step the clock back (a step below 0 would clamp at offset 0).

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <numeric>

#include "harness.h"

namespace bulwark::model {
namespace {

constexpr int kIterations = 150;  // per property in CI; BULWARK_MODEL_ITERATIONS overrides

std::vector<Op> without_step_back(std::vector<Op> ops) {
  std::erase_if(ops, [](const Op& op) { return op.kind == OpKind::step_back; });
  return ops;
}

// Offsets are whole multiples of this: the time window's buckets and the in-flight
// epochs are aligned to the clock's epoch.
Ticks alignment(const Config& c) {
  Ticks a = c.window == Window::time ? c.window_length / c.window_buckets : 1;
  if (c.count_in_flight_slow_calls) {
    const Ticks epoch = static_cast<Ticks>(
        std::bit_ceil(static_cast<std::uint64_t>(std::max<Ticks>(2, c.slow_call_duration))));
    a = std::lcm(a, epoch);
  }
  return a;
}

// Empty if `b` is `a` with times scaled by `k` and shifted by `shift`.
std::string compare(const Observation& a, const Observation& b, Ticks k, Ticks shift) {
  if (a.steps != b.steps) {
    for (std::size_t i = 0; i < std::min(a.steps.size(), b.steps.size()); ++i)
      if (a.steps[i] != b.steps[i])
        return "step " + std::to_string(i) + ": '" + a.steps[i] + "' vs '" + b.steps[i] + "'";
    return "different step counts";
  }
  if (a.retry_after.size() != b.retry_after.size()) return "different rejection counts";
  for (std::size_t i = 0; i < a.retry_after.size(); ++i) {
    const Ticks want = a.retry_after[i] == kTicksMax ? kTicksMax : a.retry_after[i] * k;
    if (b.retry_after[i] != want)
      return "rejection " + std::to_string(i) + ": retry_after " +
             std::to_string(b.retry_after[i]) + ", expected " + std::to_string(want);
  }
  if (a.events.size() != b.events.size()) return "different event counts";
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    Event want = a.events[i];
    want.at = want.at * k + shift;
    want.open_duration *= k;
    if (!(b.events[i] == want))
      return "event " + std::to_string(i) + ": " + event_text(b.events[i]) + ", expected " +
             event_text(want);
  }
  Snapshot sa = *a.last, sb = *b.last;
  sa.time_in_state *= k, sa.open_duration *= k;
  if (const std::string d = diff(sa, sb); !d.empty()) return "last snapshot\n" + d;
  return {};
}

Config scaled(Config c, Ticks k) {
  for (Ticks* d : {&c.slow_call_duration, &c.window_length, &c.open_duration, &c.max_open_duration,
                   &c.half_open_max_wait, &c.flapping_period})
    *d *= k;
  return c;
}

std::vector<Op> scaled(std::vector<Op> ops, Ticks k) {
  for (Op& op : ops)
    if (op.kind == OpKind::advance || op.kind == OpKind::resolve) op.amount *= k;
  return ops;
}

TEST(Metamorphic, ShiftingTheClockChangesNoDecision) {
  check_property(
      [] {
        const Config c = *gen_config();
        const auto ops = without_step_back(*rc::gen::container<std::vector<Op>>(gen_op()));
        const auto draws = *rc::gen::container<std::vector<double>>(
            8, rc::gen::map(rc::gen::inRange(0, 1000), [](int v) { return v / 1000.0; }));
        Observation base;
        RC_ASSERT(run_any(c, ops, 0, draws, false, &base).empty());
        const Ticks random = *rc::gen::inRange<Ticks>(1, Ticks{1} << 52);
        for (Ticks offset : {Ticks{20'000'000'000}, Ticks{1} << 40, random}) {
          const Ticks start = offset / alignment(c) * alignment(c);
          Observation shifted;
          RC_ASSERT(run_any(c, ops, start, draws, false, &shifted).empty());
          const std::string d = compare(base, shifted, 1, start);
          if (!d.empty()) RC_FAIL("clock starting at " + std::to_string(start) + ": " + d);
        }
      },
      kIterations);
}

TEST(Metamorphic, ScalingEveryDurationScalesEveryTime) {
  check_property(
      [] {
        const Config c = *gen_config();
        const auto ops = without_step_back(*rc::gen::container<std::vector<Op>>(gen_op()));
        const auto draws = *rc::gen::container<std::vector<double>>(
            8, rc::gen::map(rc::gen::inRange(0, 1000), [](int v) { return v / 1000.0; }));
        // Powers of two when calls in flight are counted: their epochs are powers of two.
        const Ticks k = c.count_in_flight_slow_calls ? *rc::gen::element<Ticks>(2, 4, 1024)
                                                     : *rc::gen::element<Ticks>(2, 3, 10, 1000);
        Observation base, big;
        RC_ASSERT(run_any(c, ops, 0, draws, false, &base).empty());
        RC_ASSERT(run_any(scaled(c, k), scaled(ops, k), 0, draws, false, &big).empty());
        const std::string d = compare(base, big, k, 0);
        if (!d.empty()) RC_FAIL("scaled by " + std::to_string(k) + ": " + d);
      },
      kIterations);
}

template <class B>
void idle_resets_leave_an_empty_window(Window w, int resets) {
  Config c;
  c.window = w;
  c.consecutive_failures = 0;
  c.failure_rate = 0.5;
  c.minimum_calls = 3;
  c.window_size = 5;
  c.window_length = 50'000'000, c.window_buckets = 5;
  ManualClock clock;
  B b(to_breaker_config<B>(c, [] { return 0.0; }), clock);
  for (int i = 0; i < 2; ++i) b.try_acquire()->record_failure();
  b.try_acquire()->record_success();
  for (int i = 0; i < resets; ++i) b.reset();
  BreakerSnapshot s = b.snapshot();
  RC_ASSERT(s.window.has_value());
  RC_ASSERT(s.window->calls == 0u);
  RC_ASSERT(!s.failure_rate.has_value());
  // The window still records the current phase: two failures in three calls trip it.
  b.try_acquire()->record_success();
  b.try_acquire()->record_failure();
  s = b.snapshot();
  RC_ASSERT(s.window.has_value());
  RC_ASSERT(s.window->calls == 2u);
  b.try_acquire()->record_failure();
  RC_ASSERT(b.state() == State::open);
}

TEST(Metamorphic, IdleResetsLeaveAnEmptyWindow) {
  check_property(
      [] {
        const int resets = *rc::gen::weightedOneOf<int>(
            {{1, rc::gen::element(1023, 1024, 2047, 2048, 4095, 4096, 5000)},
             {3, rc::gen::inRange(1, 6000)}});
        idle_resets_leave_an_empty_window<CountBreaker>(Window::count, resets);
        idle_resets_leave_an_empty_window<TimeBreaker>(Window::time, resets);
      },
      40);
}

}  // namespace
}  // namespace bulwark::model
