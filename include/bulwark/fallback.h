// bulwark/fallback.h — why a call failed, and what to answer instead.
//
// A breaker without a fallback only trades a slow failure for a fast one.
// Every call through a pipeline (pipeline.h) ends in a value or a Failure<E> that says
// which stage stopped it and why — one of a small closed set of reasons — with the
// last attempt's own error when an attempt ran. A fallback stage turns chosen reasons
// into an answer:
//
//   using bulwark::Reason;
//   auto reviews = bulwark::pipeline(
//       bulwark::fallback([](const bulwark::Failure<HttpError>&) { return Reviews::omitted(); }),
//       bulwark::breaker(reviews_breaker), bulwark::bulkhead(reviews_pool));
//
//   // only for some reasons; the others still reach the caller:
//   bulwark::fallback(cached_page, Reason::bulkhead_full | Reason::retries_exhausted);
//
//   // or map reasons yourself, e.g. to HTTP (503 while the circuit is open):
//   if (!r && r.error().is_breaker_rejection())
//     respond(503, {{"Retry-After", seconds(r.error().retry_after)}});
//
// A fallback is a value (copied into the answer), a function of no arguments, or a
// function of `const Failure<E>&`; a function may return the value type, or an
// Expected<T, Failure<E>> to decline (hand the failure on). It runs on the caller's
// thread, outside every other stage: it holds no breaker permit and no bulkhead slot.

#ifndef BULWARK_FALLBACK_H_
#define BULWARK_FALLBACK_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "bulwark/clock.h"
#include "bulwark/expected.h"

namespace bulwark {

// Why a pipeline returned no value.
enum class Reason : std::uint8_t {
  breaker_open,            // the breaker is OPEN
  breaker_half_open_full,  // HALF_OPEN and every probe slot taken
  breaker_forced_open,     // an operator forced the breaker open
  bulkhead_full,           // no free slot (and no time left to wait for one)
  deadline_exceeded,  // the request's deadline passed, or the next retry could not fit before it
  cancelled,          // the request was cancelled (its stop_token)
  retries_exhausted,  // every allowed attempt failed
  budget_exhausted,   // the retry budget refused the next retry
  timeout,            // the attempt ran past its per-attempt timeout, and was not retried
  call_error,    // the call's own error, not retried (not retryable, ignored, or no retry stage)
  rate_limited,  // the rate limiter had no permit (and no time left to wait for one)
  throttled,     // client-side throttling rejected the call locally (throttle.h)
};
inline constexpr int kReasonCount = 12;

constexpr std::string_view to_string(Reason r) noexcept {
  switch (r) {
    case Reason::breaker_open:
      return "breaker_open";
    case Reason::breaker_half_open_full:
      return "breaker_half_open_full";
    case Reason::breaker_forced_open:
      return "breaker_forced_open";
    case Reason::bulkhead_full:
      return "bulkhead_full";
    case Reason::deadline_exceeded:
      return "deadline_exceeded";
    case Reason::cancelled:
      return "cancelled";
    case Reason::retries_exhausted:
      return "retries_exhausted";
    case Reason::budget_exhausted:
      return "budget_exhausted";
    case Reason::timeout:
      return "timeout";
    case Reason::call_error:
      return "call_error";
    case Reason::rate_limited:
      return "rate_limited";
    case Reason::throttled:
      return "throttled";
  }
  return "unknown";
}

// The stage that stopped a call.
enum class Stage : std::uint8_t { breaker, bulkhead, retry, timeout, call, rate_limiter, throttle };

constexpr std::string_view to_string(Stage s) noexcept {
  switch (s) {
    case Stage::breaker:
      return "breaker";
    case Stage::bulkhead:
      return "bulkhead";
    case Stage::retry:
      return "retry";
    case Stage::timeout:
      return "timeout";
    case Stage::call:
      return "call";
    case Stage::rate_limiter:
      return "rate_limiter";
    case Stage::throttle:
      return "throttle";
  }
  return "unknown";
}

// A set of reasons: `Reason::a | Reason::b`, `Reasons::all()`, `all().except(r)`.
class Reasons {
 public:
  constexpr Reasons() noexcept = default;
  constexpr Reasons(Reason r) noexcept : bits_(bit(r)) {}  // NOLINT: a reason is a set of one
  static constexpr Reasons all() noexcept { return Reasons((1u << kReasonCount) - 1); }
  static constexpr Reasons none() noexcept { return Reasons(); }
  // breaker_open, breaker_half_open_full and breaker_forced_open.
  static constexpr Reasons breaker() noexcept {
    return Reasons(bit(Reason::breaker_open) | bit(Reason::breaker_half_open_full) |
                   bit(Reason::breaker_forced_open));
  }
  constexpr bool contains(Reason r) const noexcept { return (bits_ & bit(r)) != 0; }
  constexpr Reasons except(Reasons other) const noexcept { return Reasons(bits_ & ~other.bits_); }
  friend constexpr Reasons operator|(Reasons a, Reasons b) noexcept {
    return Reasons(a.bits_ | b.bits_);
  }
  friend constexpr bool operator==(Reasons, Reasons) noexcept = default;

 private:
  constexpr explicit Reasons(std::uint32_t bits) noexcept : bits_(bits) {}
  static constexpr std::uint32_t bit(Reason r) noexcept { return 1u << static_cast<unsigned>(r); }
  std::uint32_t bits_ = 0;
};

constexpr Reasons operator|(Reason a, Reason b) noexcept { return Reasons(a) | Reasons(b); }

// Why a call through a pipeline has no value. E is the call's own error type.
template <class E>
struct Failure {
  Reason reason{};
  Stage stage{};
  // Attempts that reached the call; 0 means the dependency was never called.
  std::uint32_t attempts = 0;
  // When it makes sense to try again: the breaker's remaining open time for a breaker
  // rejection, the dependency's own retry-after hint for a call error that had one,
  // else zero. Ready for an HTTP Retry-After header.
  Nanos retry_after = Nanos::zero();
  // The last attempt's error, if an attempt ran and failed.
  std::optional<E> error;
  // The last attempt failed after its per-attempt timeout had run out.
  bool timed_out = false;

  // True if no attempt reached the dependency (a rejection, not a failure of it).
  constexpr bool rejected() const noexcept { return attempts == 0; }
  constexpr bool is_breaker_rejection() const noexcept {
    return Reasons::breaker().contains(reason);
  }
};

// Told each time a fallback answers: whether the call was never made (stopped before
// any attempt: breaker or bulkhead said no) or was made and failed, and the reason. A
// function pointer and a target pointer: copying the stage copies the observer,
// nothing else.
class FallbackObserver {
 public:
  constexpr FallbackObserver() noexcept = default;
  // `target` needs `on_fallback(bool rejected, Reason reason)` or
  // `on_fallback(bool rejected)`, and must outlive the stage's copies.
  template <class T>
  requires requires(T& t) { t.on_fallback(true, Reason::call_error); } || requires(T& t) {
    t.on_fallback(true);
  }
  explicit FallbackObserver(T& target) noexcept
      : target_(const_cast<void*>(static_cast<const void*>(&target))), fn_(&tell<T>) {}

  void operator()(bool rejected, Reason reason) const noexcept {
    if (fn_ != nullptr) fn_(target_, rejected, reason);
  }

 private:
  template <class T>
  static void tell(void* t, bool rejected, Reason reason) noexcept {
    T& target = *static_cast<T*>(t);
    if constexpr (requires { target.on_fallback(rejected, reason); }) {
      target.on_fallback(rejected, reason);
    } else {
      target.on_fallback(rejected);
    }
  }

  void* target_ = nullptr;
  void (*fn_)(void*, bool, Reason) noexcept = nullptr;
};

// The fallback stage of a pipeline: answers for the reasons in `on`.
template <class F>
struct FallbackStage {
  static constexpr int kOrder = 0;
  F fallback;
  Reasons on;
  FallbackObserver observer{};

  // The same stage, telling `target` every time it answers. A registry Handle counts
  // the answer in its key's metrics block and emits a `fallback` event (observe.h) to
  // the registry's listeners: `fallback(f).counted_by(handle)`. A ComponentCounters
  // (metrics.h) only counts: `fallback(f).counted_by(metrics.components)`.
  template <class T>
  FallbackStage counted_by(T& target) const {
    FallbackStage copy = *this;
    copy.observer = FallbackObserver(target);
    return copy;
  }

  // Turns a failure into the pipeline's result type Out = Expected<T, Failure<E>>.
  template <class Out, class E>
  Out apply(Failure<E>&& failure) const {
    using T = typename Out::value_type;
    if (!on.contains(failure.reason)) return Unexpected(std::move(failure));
    const bool rejected = failure.rejected();
    const Reason reason = failure.reason;
    Out out = [&]() -> Out {
      if constexpr (std::is_invocable_v<const F&, const Failure<E>&>) {
        return wrap<Out>([&]() -> decltype(auto) { return fallback(std::as_const(failure)); });
      } else if constexpr (std::is_invocable_v<const F&>) {
        return wrap<Out>([&]() -> decltype(auto) { return fallback(); });
      } else {
        static_assert(
            std::is_constructible_v<T, const F&>,
            "a fallback must be a value convertible to the call's value type, or a function "
            "of () or (const Failure<E>&)");
        return Out(T(fallback));
      }
    }();
    // A fallback that declined answered nothing.
    if (out.has_value()) observer(rejected, reason);
    return out;
  }

 private:
  template <class Out, class G>
  static Out wrap(G&& g) {
    using T = typename Out::value_type;
    using R = decltype(g());
    if constexpr (std::is_same_v<std::remove_cvref_t<R>, Out>) {
      return g();
    } else if constexpr (std::is_void_v<T>) {
      static_assert(std::is_void_v<R>, "a fallback for a void call returns void");
      g();
      return Out();
    } else {
      return Out(T(g()));
    }
  }
};

// A fallback for the reasons in `on` (default: every reason). `f` is a value, a
// function of (), or a function of (const Failure<E>&).
template <class F>
constexpr FallbackStage<std::decay_t<F>> fallback(F&& f, Reasons on = Reasons::all()) {
  return {std::forward<F>(f), on, {}};
}

}  // namespace bulwark

#endif  // BULWARK_FALLBACK_H_
