// bulwark/asio/timer.h — Asio timers on a bulwark clock, real or virtual.
//
// The async pipeline and bulkhead wait on Asio timers of the caller's executor (a
// retry's backoff, a per-attempt timeout, a request deadline, a bulkhead waiter's
// limit). Which timer depends on the context's clock: `Timer<C>` is an
// ::asio::basic_waitable_timer whose clock reads the same ticks as C, so a Deadline of
// a BasicContext<C> is a timer expiry as it is.
//
//   SteadyClock  -> std::chrono::steady_clock (the same epoch: the same ticks)
//   ManualClock  -> ManualTimerClock, reading the ManualClock bound to it
//
// Asio timers need a clock with a static now(); bulwark::ManualClock has a member
// now() (each test owns its clock). ManualTimerClock bridges them: one ManualClock at
// a time is bound to it, for the scope of a ManualTimerClock::Binding, and its
// static now() reads that clock. Its wait traits cap every reactor wait at 1 ms of
// real time, so an io_context running on another thread notices within 1 ms that a
// test moved the time, and run() does not spin while a virtual timer is pending. A
// test that drives the io_context itself (poll(), then advance the clock) must make
// the reactor look at its timers after each move: on Linux it does only when its
// timerfd fires. Scheduling a timer due before every other re-arms it at once, and
// once that timer's handler has run every due timer is queued (tests/asio's
// notice_time()).
//
//   bulwark::ManualClock clock;
//   bulwark::asio::ManualTimerClock::Binding bind(clock);   // one at a time, process-wide
//   bulwark::asio::Timer<bulwark::ManualClock> t(io);
//   t.expires_at(bulwark::asio::timer_time<bulwark::ManualClock>(ticks));
//
// Other clocks: specialize bulwark::asio::TimerClock<C> with `using type = ...` (an
// Asio-compatible clock on the same epoch and tick as C) and, optionally,
// `using traits = ...` (wait traits).
//
// Cost: none beyond Asio's timer. Thread-safety: binding is not thread-safe (bind
// before the io_context runs, unbind after); reading is (an atomic pointer and the
// ManualClock's atomic).

#ifndef BULWARK_ASIO_TIMER_H_
#define BULWARK_ASIO_TIMER_H_

#include <algorithm>
#include <asio/any_io_executor.hpp>
#include <asio/basic_waitable_timer.hpp>
#include <asio/wait_traits.hpp>
#include <atomic>
#include <cassert>
#include <chrono>
#include <type_traits>

#include "bulwark/clock.h"
#include "bulwark/context.h"

namespace bulwark::asio {

// An Asio clock reading the bulwark::ManualClock currently bound to it.
class ManualTimerClock {
 public:
  using duration = Nanos;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = ManualClock::time_point;  // the ManualClock's own ticks
  static constexpr bool is_steady = true;

  // The bound clock's time; the epoch (zero) when none is bound.
  static time_point now() noexcept {
    const ManualClock* c = bound_.load(std::memory_order_acquire);
    return c != nullptr ? c->now() : time_point();
  }
  // The clock bound now, or null.
  static const ManualClock* bound() noexcept { return bound_.load(std::memory_order_acquire); }

  // Binds `clock` for its lifetime (it must outlive the binding); one at a time.
  class Binding {
   public:
    explicit Binding(const ManualClock& clock) noexcept {
      [[maybe_unused]] const ManualClock* prev = bound_.exchange(&clock, std::memory_order_acq_rel);
      assert(prev == nullptr && "one ManualClock at a time is bound to ManualTimerClock");
    }
    Binding(const Binding&) = delete;
    Binding& operator=(const Binding&) = delete;
    ~Binding() { bound_.store(nullptr, std::memory_order_release); }
  };

  // Asio's wait traits for this clock: how long (in real time) the reactor may block
  // for a virtual timer due in `d`. None if it is due; otherwise `d`, at most kMaxWait,
  // so the reactor sleeps while nothing is due (no busy loop) and compares the timers
  // with the bound clock's time again at least every kMaxWait.
  struct WaitTraits {
    static constexpr duration kMaxWait = std::chrono::milliseconds(1);
    static duration to_wait_duration(const duration& d) noexcept {
      return d <= duration::zero() ? duration::zero() : std::min(d, kMaxWait);
    }
    static duration to_wait_duration(const time_point& t) noexcept {
      const time_point n = now();
      return t <= n ? duration::zero() : std::min(t - n, kMaxWait);
    }
  };

 private:
  static inline std::atomic<const ManualClock*> bound_{nullptr};
};

// The Asio clock for a bulwark clock type; specialize it for your own clocks.
template <class C>
struct TimerClock;
template <>
struct TimerClock<SteadyClock> {
  using type = std::chrono::steady_clock;
  using traits = ::asio::wait_traits<std::chrono::steady_clock>;
};
template <>
struct TimerClock<ManualClock> {
  using type = ManualTimerClock;
  using traits = ManualTimerClock::WaitTraits;
};

// An Asio timer on C's time, on any executor.
template <class C>
using Timer = ::asio::basic_waitable_timer<typename TimerClock<C>::type,
                                           typename TimerClock<C>::traits, ::asio::any_io_executor>;

// The timer time point for `ticks` of C (a Deadline's ticks(), a now_ticks() reading).
template <class C>
typename TimerClock<C>::type::time_point timer_time(Ticks ticks) noexcept {
  using TP = typename TimerClock<C>::type::time_point;
  return TP(std::chrono::duration_cast<typename TP::duration>(Nanos(ticks)));
}

// Arms `timer` for `deadline`; "never" arms it for the timer's largest time point.
template <class C>
void expire_at(Timer<C>& timer, Deadline deadline) {
  using TP = typename TimerClock<C>::type::time_point;
  if (deadline.is_never()) {
    timer.expires_at(TP::max());
  } else {
    timer.expires_at(timer_time<C>(deadline.ticks()));
  }
}

namespace detail {
// True if `clock` is the one the timers of C read (always, except for a ManualClock
// that is not the bound one).
template <class C>
bool timers_read(const C& clock) noexcept {
  if constexpr (std::is_same_v<C, ManualClock>) {
    return ManualTimerClock::bound() == &clock;
  } else {
    (void)clock;
    return true;
  }
}
}  // namespace detail

}  // namespace bulwark::asio

#endif  // BULWARK_ASIO_TIMER_H_
