// bulwark/sleeper.h — how a retry waits out its backoff.
//
// Waiting goes through a sleeper tied to the clock, so a retry loop never calls
// std::this_thread::sleep_for itself: production sleeps in real time and wakes at
// once when the request is cancelled; tests and the simulator run in virtual time,
// where "sleeping" moves a ManualClock forward and returns immediately.
//
//   bulwark::ThreadSleeper sleeper;                   // SteadyClock
//   if (!sleeper.sleep_for(200ms, ctx.stop_token())) return cancelled();
//
//   bulwark::ManualClock clock;
//   bulwark::ManualSleeper virtual_time(clock);       // sleep_for(200ms) == clock.advance(200ms)
//
// A sleeper is any type with `bool sleep_for(Nanos, const std::stop_token&)` that
// returns true after the full duration and false as soon as stop is requested. One
// that names the clock it sleeps on (`using clock_type = ...`, as both sleepers here
// do) can only be given to a retry on that clock: a real-time sleeper behind a
// virtual-time retry would sleep for real while the deadline never moves.

#ifndef BULWARK_SLEEPER_H_
#define BULWARK_SLEEPER_H_

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <type_traits>

#include "bulwark/clock.h"

namespace bulwark {

template <class S>
concept Sleeper = requires(S& s, Nanos d, const std::stop_token& stop) {
  { s.sleep_for(d, stop) } -> std::same_as<bool>;
};

// Sleeps the calling thread on the steady clock. Stop requests wake it at once
// (a std::stop_callback notifies a condition variable on the sleeper's stack frame).
// Costs no allocation. Thread-safe: stateless, any number of threads may sleep on one.
struct ThreadSleeper {
  using clock_type = SteadyClock;
  bool sleep_for(Nanos d, const std::stop_token& stop) const {
    if (stop.stop_requested()) return false;
    if (d <= Nanos::zero()) return true;
    std::mutex mu;
    std::condition_variable cv;
    bool stopped = false;
    std::stop_callback wake(stop, [&] {
      std::lock_guard lock(mu);
      stopped = true;
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    // wait_until on a saturated time point would overflow inside the library.
    const auto now = std::chrono::steady_clock::now();
    const auto limit = std::chrono::steady_clock::time_point::max() - now;
    const auto until = d >= limit ? std::chrono::steady_clock::time_point::max() : now + d;
    cv.wait_until(lock, until, [&] { return stopped; });
    return !stopped;
  }
};
static_assert(Sleeper<ThreadSleeper>);

// Sleeps in virtual time: advances the ManualClock by the full duration and returns
// at once. A stop requested before the call wins (returns false, time unchanged).
// Thread-safe as ManualClock is, but with several threads sleeping on one clock each
// moves everyone's time: use it from one thread (a test, a discrete-event simulator).
class ManualSleeper {
 public:
  using clock_type = ManualClock;
  explicit ManualSleeper(ManualClock& clock) noexcept : clock_(&clock) {}
  bool sleep_for(Nanos d, const std::stop_token& stop) const noexcept {
    if (stop.stop_requested()) return false;
    if (d > Nanos::zero()) clock_->advance(d);
    return true;
  }

 private:
  ManualClock* clock_;
};
static_assert(Sleeper<ManualSleeper>);

namespace detail {
// True unless the sleeper names a clock other than C.
template <class S, class C>
constexpr bool sleeper_runs_on() noexcept {
  if constexpr (requires { typename S::clock_type; }) {
    return std::is_same_v<typename S::clock_type, C>;
  } else {
    return true;
  }
}
}  // namespace detail

}  // namespace bulwark

#endif  // BULWARK_SLEEPER_H_
