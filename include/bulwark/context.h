// bulwark/context.h — a request's deadline and cancellation, handed to every call.
//
// A per-request deadline, not a per-call timeout, is what protects a service: if the
// caller has already waited 1.5 s of its 2 s, the next call is born with
// 500 ms. A Context carries that absolute deadline and a cancellation signal
// (std::stop_token) down through the resilience pipeline into the user's call, which
// passes `remaining()` to its own I/O.
//
//   std::stop_source cancel;
//   bulwark::Context ctx(bulwark::SteadyClock{}, cancel.get_token(),
//                        bulwark::Deadline::after(bulwark::SteadyClock{}, 2s));
//   auto attempt = ctx.with_timeout(800ms);         // min(2 s deadline, now + 800 ms)
//   client.get(url, attempt.remaining());
//
// A child context can only shorten its parent's deadline and always shares its
// parent's cancellation, so nothing inside a request can outlive the request.
//
// Time never overflows: the default deadline is "never" (the largest tick), adding a
// huge timeout saturates, and remaining() is never negative.
//
// Cost: a Context is a few words (deadline, stop_token, attempt pointer, and a clock
// pointer for stateful clocks). Copying it copies the stop_token (one atomic
// increment if a stop_source exists). Reading the clock happens only in the calls
// that need the time (remaining(), expired(), with_timeout()) and never when the
// deadline is "never".
//
// Thread-safety: a Context is an immutable value; copies may be used from any thread.

#ifndef BULWARK_CONTEXT_H_
#define BULWARK_CONTEXT_H_

#include <algorithm>
#include <chrono>
#include <compare>
#include <cstdint>
#include <stop_token>
#include <string_view>
#include <type_traits>
#include <utility>

#include "bulwark/clock.h"

namespace bulwark {

// An absolute point in a clock's time (in Ticks) by which work must be done; by
// default, never. Comparable: the earlier deadline is the smaller one.
class Deadline {
 public:
  // Never expires.
  constexpr Deadline() noexcept = default;
  static constexpr Deadline never() noexcept { return Deadline(); }
  // Expires at `t` (a reading of the clock that will check it).
  static constexpr Deadline at(Ticks t) noexcept { return Deadline(t); }
  // Expires `d` after the clock's current time; saturates ("never") for huge `d`.
  template <Clock C, class Rep, class Period>
  static Deadline after(const C& clock, std::chrono::duration<Rep, Period> d) noexcept {
    const Ticks delta = to_ticks(d);
    if (delta == kTicksMax) return never();
    return Deadline(saturating_add(now_ticks(clock), std::max<Ticks>(delta, 0)));
  }

  constexpr bool is_never() const noexcept { return ticks_ == kTicksMax; }
  constexpr Ticks ticks() const noexcept { return ticks_; }

  // True once `now` has reached the deadline.
  constexpr bool passed(Ticks now) const noexcept { return !is_never() && now >= ticks_; }
  // Time left at `now`: zero once passed, Nanos::max() for "never".
  constexpr Nanos remaining(Ticks now) const noexcept {
    if (is_never()) return Nanos::max();
    return Nanos(std::max<Ticks>(0, saturating_sub(ticks_, now)));
  }

  friend constexpr Deadline earliest(Deadline a, Deadline b) noexcept {
    return a.ticks_ <= b.ticks_ ? a : b;
  }
  friend constexpr auto operator<=>(Deadline, Deadline) noexcept = default;

 private:
  constexpr explicit Deadline(Ticks t) noexcept : ticks_(t) {}
  Ticks ticks_ = kTicksMax;
};

// Which attempt of a logical operation a call is, as the retry stage tells it.
struct AttemptInfo {
  std::uint32_t number = 1;               // 1 for the first attempt
  std::string_view idempotency_key = {};  // the same for every attempt; empty if none
};

template <Clock C = SteadyClock>
class BasicContext {
 public:
  using clock_type = C;

  // No deadline, no cancellation.
  BasicContext() noexcept requires std::is_empty_v<C>
  = default;
  // A context reading `clock` (which must outlive it and all its children), with an
  // optional cancellation signal and deadline.
  explicit BasicContext(const C& clock, std::stop_token stop = {}, Deadline deadline = {}) noexcept
      : clock_(clock), deadline_(deadline), stop_(std::move(stop)) {}
  BasicContext(const C&&, std::stop_token = {},
               Deadline = {}) requires(!std::is_empty_v<C>) = delete;

  // A child whose deadline is the earlier of this one's and `d`. Same cancellation.
  BasicContext with_deadline(Deadline d) const noexcept {
    BasicContext child = *this;
    child.deadline_ = earliest(deadline_, d);
    return child;
  }
  // A child expiring `timeout` from now, or at this context's deadline if that comes
  // first. Reads the clock once.
  template <class Rep, class Period>
  BasicContext with_timeout(std::chrono::duration<Rep, Period> timeout) const noexcept {
    return with_deadline(Deadline::after(clock(), timeout));
  }
  // A child that knows which attempt it is (set by the retry stage).
  BasicContext with_attempt(const AttemptInfo* attempt) const noexcept {
    BasicContext child = *this;
    child.attempt_ = attempt;
    return child;
  }

  // The deadline (Deadline::never() without one), and whether there is one. Free.
  Deadline deadline() const noexcept { return deadline_; }
  bool has_deadline() const noexcept { return !deadline_.is_never(); }
  // Time left before the deadline; Nanos::max() without one (no clock read then).
  Nanos remaining() const noexcept {
    return has_deadline() ? deadline_.remaining(now()) : Nanos::max();
  }
  // True once the deadline has passed (no clock read without a deadline).
  bool expired() const noexcept { return has_deadline() && deadline_.passed(now()); }

  // The caller's cancellation, and whether it was requested (one atomic load).
  const std::stop_token& stop_token() const noexcept { return stop_; }
  bool stop_requested() const noexcept { return stop_.stop_requested(); }

  // 1 outside a retry stage.
  std::uint32_t attempt() const noexcept { return attempt_ ? attempt_->number : 1; }
  // The key shared by every attempt of this logical operation (see RetryConfig);
  // empty if none was made.
  std::string_view idempotency_key() const noexcept {
    return attempt_ ? attempt_->idempotency_key : std::string_view();
  }

  decltype(auto) clock() const noexcept { return clock_.get(); }
  Ticks now() const noexcept { return now_ticks(clock_.get()); }

 private:
  [[no_unique_address]] detail::ClockRef<C> clock_;
  Deadline deadline_;
  std::stop_token stop_;
  const AttemptInfo* attempt_ = nullptr;
};

using Context = BasicContext<SteadyClock>;

}  // namespace bulwark

#endif  // BULWARK_CONTEXT_H_
