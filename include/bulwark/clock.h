// bulwark/clock.h — the time source every bulwark component is given.
//
// Every time-dependent piece of bulwark (breaker recovery, sliding windows, retry
// backoff, deadlines) reads a clock it was handed as a template parameter, never a
// global one. Production code uses `SteadyClock`, an empty type whose `now()` is an
// inline call to std::chrono::steady_clock: no virtual call, no pointer, no storage.
// Tests and the simulator use `ManualClock` and move time themselves, so hours of
// traffic run in milliseconds and no test ever sleeps.
//
//   bulwark::ManualClock clock;
//   bulwark::BasicCircuitBreaker<bulwark::ManualClock> breaker(config, clock);
//   clock.advance(std::chrono::seconds(30));   // the open period has now elapsed
//
// Internally bulwark keeps time as signed 64-bit nanoseconds since the clock's epoch
// (`Ticks`). Arithmetic on ticks saturates instead of overflowing.

#ifndef BULWARK_CLOCK_H_
#define BULWARK_CLOCK_H_

#include <time.h>

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace bulwark {

using Nanos = std::chrono::nanoseconds;

// Nanoseconds since a clock's epoch. Only differences between two readings of the
// same clock mean anything.
using Ticks = std::int64_t;

inline constexpr Ticks kTicksMax = std::numeric_limits<Ticks>::max();
inline constexpr Ticks kTicksMin = std::numeric_limits<Ticks>::min();

// a + b, clamped to the representable range instead of overflowing.
constexpr Ticks saturating_add(Ticks a, Ticks b) noexcept {
  Ticks r = 0;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? kTicksMax : kTicksMin;
  return r;
}

// a - b, clamped to the representable range instead of overflowing.
constexpr Ticks saturating_sub(Ticks a, Ticks b) noexcept {
  Ticks r = 0;
  if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? kTicksMax : kTicksMin;
  return r;
}

// A steady clock bulwark can read. `now()` must be callable on a const object and
// return a std::chrono::time_point whose duration converts to nanoseconds; the clock
// must never go backwards (`is_steady`, checked as folly does). A clock may also offer
// `coarse_now()`: a cheaper reading that may lag `now()` by a few milliseconds but is
// never ahead of it, used where second-sized time buckets don't need nanosecond time
// and to reject while OPEN.
template <class C>
concept Clock = requires(const C& c) {
  typename C::time_point;
  { c.now() } -> std::same_as<typename C::time_point>;
  requires C::is_steady;
  requires std::convertible_to<typename C::time_point::duration, Nanos>;
};

// Reads `clock` as ticks.
template <Clock C>
inline Ticks now_ticks(const C& clock) noexcept {
  return std::chrono::duration_cast<Nanos>(clock.now().time_since_epoch()).count();
}

// Reads the clock's coarse time if it has one, else its precise time.
template <Clock C>
inline Ticks coarse_now_ticks(const C& clock) noexcept {
  if constexpr (requires { clock.coarse_now(); }) {
    return std::chrono::duration_cast<Nanos>(clock.coarse_now().time_since_epoch()).count();
  } else {
    return now_ticks(clock);
  }
}

// Converts a duration to ticks, saturating (a duration of hours::max() is "forever",
// not a negative number).
template <class Rep, class Period>
constexpr Ticks to_ticks(std::chrono::duration<Rep, Period> d) noexcept {
  using std::chrono::duration;
  using std::chrono::duration_cast;
  constexpr auto kMax = duration_cast<duration<long double, std::nano>>(Nanos::max());
  constexpr auto kMin = duration_cast<duration<long double, std::nano>>(Nanos::min());
  const auto wide = duration_cast<duration<long double, std::nano>>(d);
  if (wide >= kMax) return kTicksMax;
  if (wide <= kMin) return kTicksMin;
  return duration_cast<Nanos>(d).count();
}

// The production clock: std::chrono::steady_clock (CLOCK_MONOTONIC on Linux).
// An empty type; reading it is a direct vDSO call (~20-30 ns on a VM).
struct SteadyClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;

  static time_point now() noexcept { return std::chrono::steady_clock::now(); }

  // CLOCK_MONOTONIC_COARSE: same epoch as steady_clock on Linux, updated once per
  // scheduler tick (1-4 ms), and several times cheaper to read.
  static time_point coarse_now() noexcept {
#if defined(CLOCK_MONOTONIC_COARSE)
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return time_point(
        std::chrono::duration_cast<duration>(std::chrono::seconds(ts.tv_sec) + Nanos(ts.tv_nsec)));
#else
    return now();
#endif
  }
};
static_assert(Clock<SteadyClock>);
static_assert(std::is_empty_v<SteadyClock>);

// A clock that only moves when told to. Thread-safe: any thread may read it while
// another advances it. It is "steady" in the sense bulwark needs as long as callers
// only move it forward; `set()` can move it backwards on purpose, to test that no
// component misbehaves when a clock steps back (they treat it as no time passing).
class ManualClock {
 public:
  using duration = Nanos;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ManualClock, Nanos>;
  static constexpr bool is_steady = true;

  constexpr ManualClock() noexcept = default;
  explicit constexpr ManualClock(time_point start) noexcept
      : ticks_(start.time_since_epoch().count()) {}
  ManualClock(const ManualClock&) = delete;
  ManualClock& operator=(const ManualClock&) = delete;

  time_point now() const noexcept {
    return time_point(Nanos(ticks_.load(std::memory_order_acquire)));
  }

  // Moves time forward by `d` (saturating at the largest representable time).
  template <class Rep, class Period>
  void advance(std::chrono::duration<Rep, Period> d) noexcept {
    const Ticks delta = to_ticks(d);
    Ticks cur = ticks_.load(std::memory_order_relaxed);
    while (!ticks_.compare_exchange_weak(cur, saturating_add(cur, delta), std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
    }
  }

  // Sets the time, forwards or backwards.
  void set(time_point t) noexcept {
    ticks_.store(t.time_since_epoch().count(), std::memory_order_release);
  }
  template <class Rep, class Period>
  void set(std::chrono::duration<Rep, Period> since_epoch) noexcept {
    ticks_.store(to_ticks(since_epoch), std::memory_order_release);
  }

 private:
  std::atomic<Ticks> ticks_{0};
};
static_assert(Clock<ManualClock>);

namespace detail {

// How a component keeps its clock: stateless clocks (SteadyClock) are recreated on
// every read and cost no storage; stateful ones (ManualClock) are referenced.
template <Clock C>
class ClockRef {
 public:
  explicit ClockRef(const C& clock) noexcept : clock_(&clock) {}
  const C& get() const noexcept { return *clock_; }

 private:
  const C* clock_;
};

template <Clock C>
requires std::is_empty_v<C> && std::is_default_constructible_v<C>
class ClockRef<C> {
 public:
  ClockRef() noexcept = default;
  explicit ClockRef(const C&) noexcept {}
  C get() const noexcept { return C{}; }
};

}  // namespace detail
}  // namespace bulwark

#endif  // BULWARK_CLOCK_H_
