// bulwark/pipeline.h — the resilience stages composed around one dependency call.
//
// A resilient call composes up to eight patterns, from the inside out: a per-attempt
// timeout, retry with backoff and jitter (under a retry budget), a bulkhead,
// client-side adaptive throttling, a circuit breaker, a rate limiter and a fallback. A
// pipeline composes any subset of them in that one order, written outermost first
// where it is composed:
//
//   fallback ∘ rate_limit ∘ breaker ∘ throttle ∘ bulkhead ∘ retry ∘ timeout ∘ call
//
//   auto call_payments = bulwark::pipeline(
//       bulwark::fallback([](const bulwark::Failure<HttpError>&) { return Receipt::pending(); }),
//       bulwark::breaker(payments_breaker),        // sees the whole retry sequence
//       bulwark::bulkhead(payments_pool),          // one slot for the whole sequence
//       bulwark::retry(payments_retry),            // backoff, deadline, budget
//       bulwark::timeout(2s));                     // each attempt: min(deadline, now + 2 s)
//
//   bulwark::Expected<Receipt, bulwark::Failure<HttpError>> r =
//       call_payments.execute(ctx, [&](const bulwark::Context& c) -> bulwark::Expected<Receipt,
//       HttpError> {
//         return client.post(url, body, c.remaining(), c.idempotency_key());
//       });
//
// An adaptive limit (`bulwark::adaptive_limit(l)`, adaptive_limit.h) may take the
// bulkhead's place: it refuses at once when full, and learns from how each call ended.
//
// The stages must be given in that order (a compile-time error otherwise), each at
// most once. The pipeline holds references to the breaker, bulkhead and retry (they
// are shared by every call to the dependency and must outlive it) and copies of the
// fallback and timeout. Everything is resolved at compile time: no virtual call, no
// type erasure, no allocation — a stage that is absent costs nothing.
//
// The call. `call(const BasicContext<C>&)` (or `call()`) returns Expected<T, E>. A
// value is a success. An error is classified by ErrorTraits<E> (error_traits.h): failure (the
// default), or ignored — the caller's own fault, such as a 4xx: never retried, and
// neither a success nor a failure for the breaker. An exception thrown by the call is
// not retried: it releases every permit, counts as a failure for the breaker, and
// propagates unchanged. An exception thrown before any attempt ran (by the retry's
// idempotency_key hook, say) propagates too, but cancels the breaker permit: the
// dependency was never called, so it is neither a success nor a failure.
//
// The result is Expected<T, Failure<E>>: the value, or which stage stopped the call,
// why, after how many attempts, and the last attempt's error (fallback.h).
//
// The breaker sees, by default, the outcome of the whole retry sequence (the
// breaker wraps the retry). `breaker(b, BreakerScope::attempt)` makes it see every
// attempt instead: each retry asks the breaker again, so an opening breaker stops the
// retries. Either way a breaker permit is given back as cancelled (neither success nor
// failure) when an inner stage stops the call before it runs — a half-open probe
// turned away by a full bulkhead frees its probe slot instead of wedging HALF_OPEN.
//
// Durations. With BreakerScope::call the pipeline reports a zero duration, which
// BasicCircuitBreaker reads as "measure it yourself" (from admission to report: the
// bulkhead wait and every attempt and backoff), so no clock is read for a breaker that
// does not judge slowness. With BreakerScope::attempt each attempt is timed with the
// context clock's coarse reading, since the first permit predates the bulkhead wait.
//
// Cost of a call that succeeds first time, with every stage: the breaker's admission
// load and its outcome report, one CAS and one subtract for the bulkhead, one CAS for
// the budget deposit (a load once the budget is full), one relaxed add counting the
// call in the retry (RetrySnapshot's kinds), and one precise clock read for
// a per-attempt timeout (plus one for a request deadline). See bench/pipeline_bench.cc.
// A rate limit stage adds a precise clock read and a CAS (rate_limiter.h); a throttle
// stage a coarse clock read and its bucket loads before the call, one CAS after it
// (throttle.h). Neither allocates or locks (tests/pipeline_limits_test.cc).
//
// Thread-safety: execute() may be called concurrently; it is as thread-safe as its
// stages, which all are.

#ifndef BULWARK_PIPELINE_H_
#define BULWARK_PIPELINE_H_

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "bulwark/bulkhead.h"
#include "bulwark/circuit_breaker.h"
#include "bulwark/clock.h"
#include "bulwark/context.h"
#include "bulwark/detail/pipeline_parts.h"
#include "bulwark/error_traits.h"
#include "bulwark/expected.h"
#include "bulwark/fallback.h"
#include "bulwark/outcome.h"
#include "bulwark/rate_limiter.h"
#include "bulwark/retry.h"
#include "bulwark/sleeper.h"
#include "bulwark/throttle.h"

namespace bulwark {

// What the breaker stage reports to the breaker.
enum class BreakerScope : std::uint8_t {
  call,     // one outcome per call: the outcome of its last attempt
  attempt,  // one outcome per attempt; every retry asks the breaker for a new permit
};

// Anything with try_acquire() -> Expected<typename B::Permit, Rejection>, whose
// Permit has record(Outcome, Nanos) (a zero duration meaning "measure it yourself")
// and cancels itself when destroyed unrecorded, and which names the clock it reads
// as `clock_type` (it must be the context's: see Pipeline::execute).
template <class B>
concept BreakerLike = requires(B& b, typename B::Permit& p) {
  typename B::clock_type;
  { b.try_acquire() } -> std::same_as<Expected<typename B::Permit, Rejection>>;
  p.record(Outcome::success, Nanos::zero());
};

template <class B>
struct BreakerStage {
  static constexpr int kOrder = 1;
  using clock_type = typename B::clock_type;
  B* breaker;
  BreakerScope scope;
};
template <BreakerLike B>
constexpr BreakerStage<B> breaker(B& b, BreakerScope scope = BreakerScope::call) noexcept {
  return {&b, scope};
}

template <class H>
struct BulkheadStage {
  static constexpr int kOrder = 2;
  using clock_type = typename H::clock_type;
  H* bulkhead;
};
template <class C>
constexpr BulkheadStage<BasicBulkhead<C>> bulkhead(BasicBulkhead<C>& b) noexcept {
  return {&b};
}

// The default retry-on predicate: failures only, never ignored outcomes.
struct RetryFailures {
  template <class E>
  bool operator()(const E& e) const {
    return ErrorTraits<E>::outcome(e) == Outcome::failure;
  }
};

template <class R, class Pred>
struct RetryStage {
  static constexpr int kOrder = 3;
  using clock_type = typename R::clock_type;
  R* retry;
  Pred retry_on;
};
// Retries failures (ErrorTraits<E>::outcome(e) == failure).
template <class C, class S>
constexpr RetryStage<BasicRetry<C, S>, RetryFailures> retry(BasicRetry<C, S>& r) noexcept {
  return {&r, {}};
}
// Retries the errors for which `retry_on(const E&)` is true (Polly's ShouldHandle),
// replacing the default. It runs on the calling thread, after a failed attempt.
template <class C, class S, class Pred>
constexpr RetryStage<BasicRetry<C, S>, std::decay_t<Pred>> retry(BasicRetry<C, S>& r,
                                                                 Pred&& retry_on) {
  return {&r, std::forward<Pred>(retry_on)};
}

struct TimeoutStage {
  static constexpr int kOrder = 4;
  Nanos timeout;
};

// Never waits: a call finding no permit fails at once with Reason::rate_limited and
// the limiter's exact wait in Failure::retry_after.
struct NoRateWait {};

template <class L, class Sl>
struct RateLimitStage {
  static constexpr int kRank = 5;  // between the fallback and the breaker
  using clock_type = typename L::clock_type;
  L* limiter;
  Sl* sleeper;     // NoRateWait: never wait
  Nanos max_wait;  // with a sleeper: the longest wait, capped by the deadline
  std::uint64_t permits;
};
// The rate limiter stage (rate_limiter.h), outermost but for the fallback: a refused
// call reaches no breaker, bulkhead or dependency. Never waits; takes `permits` per
// call.
template <class C>
constexpr RateLimitStage<BasicRateLimiter<C>, NoRateWait> rate_limit(BasicRateLimiter<C>& l,
                                                                     std::uint64_t permits = 1) {
  return {&l, nullptr, Nanos::zero(), permits};
}
// The same, but a call whose permit is due within min(max_wait, the context's
// remaining time) reserves it and sleeps until it is due on `sleeper` (which must be on
// the limiter's clock). Cancellation wakes it (Reason::cancelled); the reserved permit
// is spent anyway.
template <class C, Sleeper Sl>
constexpr RateLimitStage<BasicRateLimiter<C>, Sl> rate_limit(BasicRateLimiter<C>& l, Sl& sleeper,
                                                             Nanos max_wait = Nanos::max(),
                                                             std::uint64_t permits = 1) {
  static_assert(detail::sleeper_runs_on<Sl, C>(),
                "bulwark::rate_limit: the sleeper must sleep on the rate limiter's clock");
  return {&l, &sleeper, max_wait, permits};
}

template <class T, class A>
struct ThrottleStage {
  static constexpr int kRank = 15;  // between the breaker and the bulkhead
  using clock_type = typename T::clock_type;
  T* throttle;
  A accepts;
};
// Client-side adaptive throttling (throttle.h): asks the throttle before the bulkhead
// and the retries, and reports how the call ended. One call is one request, whatever
// its retries (the retry budget bounds those). A call stopped inside before any
// attempt (bulkhead full, cancelled) is not counted; an exception counts as refused;
// a success as accepted; a failure as `accepts(const Failure<E>&)` says
// (ThrottleAccepts by default: not a timeout, and no overload signal).
template <class C>
constexpr ThrottleStage<BasicThrottle<C>, ThrottleAccepts> throttle(BasicThrottle<C>& t) noexcept {
  return {&t, {}};
}
template <class C, class A>
constexpr ThrottleStage<BasicThrottle<C>, std::decay_t<A>> throttle(BasicThrottle<C>& t,
                                                                    A&& accepts) {
  return {&t, std::forward<A>(accepts)};
}
// Each attempt gets a child context expiring `d` after it starts (or at the request's
// deadline, if that comes first). The call is expected to honour ctx.remaining(): a
// timeout does not interrupt a call (nothing can, safely, in C++); it bounds the time
// the call is told it has. A failure after the timeout ran out is reported as a
// timeout; a success that came late is still a success. Throws InvalidConfig (aborts
// without exceptions) for a timeout that is not positive.
template <class Rep, class Period>
TimeoutStage timeout(std::chrono::duration<Rep, Period> d) {
  const Ticks t = to_ticks(d);
  // A zero or negative timeout would fail every attempt before it starts.
  if (t <= 0) {
    detail::raise_config_error(
        {"timeout stage", "timeout", "must be positive (got " + std::to_string(t) + "ns)"});
  }
  return {Nanos(t)};
}

template <class... S>
class Pipeline {
  static_assert(detail::strictly_ordered<S...>(),
                "pipeline stages go outermost first, each at most once: "
                "fallback, rate_limit, breaker, throttle, bulkhead, retry, timeout");

  static constexpr int kFallback = detail::stage_index<0, S...>();
  static constexpr int kRateLimit = detail::stage_index<5, S...>();
  static constexpr int kBreaker = detail::stage_index<10, S...>();
  static constexpr int kThrottle = detail::stage_index<15, S...>();
  static constexpr int kBulkhead = detail::stage_index<20, S...>();
  static constexpr int kRetry = detail::stage_index<30, S...>();
  static constexpr int kTimeout = detail::stage_index<40, S...>();

 public:
  constexpr explicit Pipeline(S... stages) : stages_(std::move(stages)...) {}

  // Runs `call` through the stages. Blocks only to wait out a retry's backoff (through
  // the retry's sleeper) or for a bulkhead slot (up to its max_wait); both end early
  // at the context's deadline and on its cancellation.
  //
  // Every stage must run on the context's clock type (a compile-time error otherwise):
  // a steady-clock retry inside a BasicContext<ManualClock> would sleep its backoff in
  // real time while the virtual deadline never moved.
  template <Clock C, class F>
  auto execute(const BasicContext<C>& ctx, F&& call) const {
    static_assert(detail::stage_runs_on<kBreaker, C, S...>(),
                  "bulwark::pipeline: the breaker's clock_type must be the context's clock "
                  "(BasicContext<C> needs a breaker on C too)");
    static_assert(detail::stage_runs_on<kBulkhead, C, S...>(),
                  "bulwark::pipeline: the bulkhead's clock_type must be the context's clock "
                  "(BasicContext<C> needs a BasicBulkhead<C>)");
    static_assert(detail::stage_runs_on<kRateLimit, C, S...>(),
                  "bulwark::pipeline: the rate limiter's clock_type must be the context's clock");
    static_assert(detail::stage_runs_on<kThrottle, C, S...>(),
                  "bulwark::pipeline: the throttle's clock_type must be the context's clock");
    static_assert(detail::stage_runs_on<kRetry, C, S...>(),
                  "bulwark::pipeline: the retry's clock_type must be the context's clock "
                  "(BasicContext<C> needs a BasicRetry<C, ...>; another clock would sleep "
                  "the backoff on one time while the deadline is read on the other)");
    using Ctx = BasicContext<C>;
    using R = std::remove_cvref_t<call_result_t<F, Ctx>>;
    static_assert(Result<R>,
                  "the call must return bulwark::Expected<T, E>, std::expected<T, E>, or a "
                  "type with a bulwark::ResultTraits specialization (error_traits.h)");
    using T = typename ResultTraits<R>::value_type;
    using E = typename ResultTraits<R>::error_type;
    using Out = Expected<T, Failure<E>>;

    detail::Trace trace;
    Out out = run_rate_limit<Out, E>(ctx, call, trace);
    if constexpr (kFallback >= 0) {
      if (!out) return std::get<kFallback>(stages_).template apply<Out>(std::move(out).error());
    }
    return out;
  }

  // execute(), so a pipeline reads as the function it wraps.
  template <Clock C, class F>
  auto operator()(const BasicContext<C>& ctx, F&& call) const {
    return execute(ctx, std::forward<F>(call));
  }

 private:
  template <class F, class Ctx>
  using call_result_t =
      typename std::conditional_t<std::is_invocable_v<F&, const Ctx&>,
                                  std::invoke_result<F&, const Ctx&>, std::invoke_result<F&>>::type;

  template <class E>
  static Unexpected<Failure<E>> fail(Reason reason, Stage stage, std::uint32_t attempts,
                                     std::optional<E>&& error, Nanos retry_after = Nanos::zero(),
                                     bool timed_out = false) {
    Failure<E> f;
    f.reason = reason;
    f.stage = stage;
    f.attempts = attempts;
    f.retry_after = retry_after;
    f.error = std::move(error);
    f.timed_out = timed_out;
    return Unexpected(std::move(f));
  }

  template <class Out, class E, class Ctx, class F>
  Out run_rate_limit(const Ctx& ctx, F& call, detail::Trace& trace) const {
    if constexpr (kRateLimit < 0) {
      return run_breaker<Out, E>(ctx, call, trace);
    } else {
      const auto& stage = std::get<kRateLimit>(stages_);
      if constexpr (std::is_same_v<std::remove_pointer_t<decltype(stage.sleeper)>, NoRateWait>) {
        auto ok = stage.limiter->try_acquire(stage.permits);
        if (!ok) {
          return fail<E>(Reason::rate_limited, Stage::rate_limiter, 0, std::nullopt,
                         ok.error().retry_after);
        }
      } else {
        if (ctx.stop_requested())
          return fail<E>(Reason::cancelled, Stage::rate_limiter, 0, std::nullopt);
        const Nanos max_wait = std::min(stage.max_wait, ctx.remaining());
        auto wait = stage.limiter->reserve(stage.permits, max_wait);
        if (!wait) {
          return fail<E>(Reason::rate_limited, Stage::rate_limiter, 0, std::nullopt,
                         wait.error().retry_after);
        }
        if (*wait > Nanos::zero() && !stage.sleeper->sleep_for(*wait, ctx.stop_token()))
          return fail<E>(Reason::cancelled, Stage::rate_limiter, 0, std::nullopt);
      }
      return run_breaker<Out, E>(ctx, call, trace);
    }
  }

  // The throttle stage around the bulkhead: asks, then reports how the call ended.
  template <class Out, class E, class Ctx, class F, class Hook>
  Out run_throttle(const Ctx& ctx, F& call, detail::Trace& trace, Hook& hook) const {
    if constexpr (kThrottle < 0) {
      return run_bulkhead<Out, E>(ctx, call, trace, hook);
    } else {
      const auto& stage = std::get<kThrottle>(stages_);
      if (!stage.throttle->try_acquire())
        return fail<E>(Reason::throttled, Stage::throttle, 0, std::nullopt);
#if defined(__cpp_exceptions)
      try {
#endif
        Out out = run_bulkhead<Out, E>(ctx, call, trace, hook);
        if (trace.attempts > 0)
          stage.throttle->record(out.has_value() || stage.accepts(std::as_const(out.error())));
        return out;
#if defined(__cpp_exceptions)
      } catch (...) {
        if (trace.attempts > 0) stage.throttle->record(false);
        throw;
      }
#endif
    }
  }

  template <class Out, class E, class Ctx, class F>
  Out run_breaker(const Ctx& ctx, F& call, detail::Trace& trace) const {
    if constexpr (kBreaker < 0) {
      detail::NoAttemptHook hook;
      return run_throttle<Out, E>(ctx, call, trace, hook);
    } else {
      const auto& stage = std::get<kBreaker>(stages_);
      using B = std::remove_pointer_t<decltype(stage.breaker)>;
      auto permit = stage.breaker->try_acquire();
      if (!permit) {
        return fail<E>(detail::reason_of(permit.error().reason), Stage::breaker, 0, std::nullopt,
                       permit.error().retry_after);
      }
      if (stage.scope == BreakerScope::attempt) {
        detail::BreakerAttemptHook<B> hook{stage.breaker, std::move(*permit)};
        return run_throttle<Out, E>(ctx, call, trace, hook);
      }
      detail::NoAttemptHook hook;
      // The duration is left to the breaker (zero: "measure it yourself", from
      // admission to report), so a breaker that does not judge slowness reads no clock.
#if defined(__cpp_exceptions)
      try {
#endif
        Out out = run_throttle<Out, E>(ctx, call, trace, hook);
        // No attempt ran (an inner stage said no): the permit is dropped unrecorded,
        // which cancels it and frees a half-open probe slot.
        if (trace.attempts > 0) permit->record(trace.last, Nanos::zero());
        return out;
#if defined(__cpp_exceptions)
      } catch (...) {
        // Blame the dependency only if it was called. An exception from before the
        // first attempt (the idempotency-key hook, the bulkhead) drops the permit
        // unrecorded, which cancels it — as the per-attempt scope does.
        if (trace.attempts > 0) permit->record(Outcome::failure, Nanos::zero());
        throw;
      }
#endif
    }
  }

  template <class Out, class E, class Ctx, class F, class Hook>
  Out run_bulkhead(const Ctx& ctx, F& call, detail::Trace& trace, Hook& hook) const {
    if constexpr (kBulkhead < 0) {
      return run_attempts<Out, E>(ctx, call, trace, hook);
    } else if constexpr (requires { std::get<kBulkhead>(stages_).limiter; }) {
      // An adaptive limit (adaptive_limit.h): admits or refuses at once, and learns
      // from how the call ended (an exception leaves the permit unsettled: ignored).
      const auto& stage = std::get<kBulkhead>(stages_);
      auto permit = stage.limiter->try_acquire();
      if (!permit) return fail<E>(Reason::bulkhead_full, Stage::bulkhead, 0, std::nullopt);
      Out out = run_attempts<Out, E>(ctx, call, trace, hook);
      stage.settle(*permit, out, trace.attempts, trace.last);
      return out;
    } else {
      auto slot = std::get<kBulkhead>(stages_).bulkhead->acquire(ctx);
      if (!slot)
        return fail<E>(detail::reason_of(slot.error().reason), Stage::bulkhead, 0, std::nullopt);
      return run_attempts<Out, E>(ctx, call, trace, hook);
    }  // the slot goes back here, whatever happened inside
  }

  template <class Ctx, class F>
  static decltype(auto) invoke_call(F& call, const Ctx& ctx) {
    if constexpr (std::is_invocable_v<F&, const Ctx&>) {
      return std::invoke(call, ctx);
    } else {
      return std::invoke(call);
    }
  }

  // The attempts, and with a retry stage the call counted by how it ended.
  template <class Out, class E, class Ctx, class F, class Hook>
  Out run_attempts(const Ctx& ctx, F& call, detail::Trace& trace, Hook& hook) const {
    if constexpr (kRetry < 0) {
      return attempt_loop<Out, E>(ctx, call, trace, hook);
    } else {
      auto* retry = std::get<kRetry>(stages_).retry;
#if defined(__cpp_exceptions)
      try {
#endif
        Out out = attempt_loop<Out, E>(ctx, call, trace, hook);
        retry->note_call(out.has_value(), trace.attempts);
        return out;
#if defined(__cpp_exceptions)
      } catch (...) {
        retry->note_call(false, trace.attempts);
        throw;
      }
#endif
    }
  }

  // The retry loop (a single attempt without a retry stage). See retry.h for the
  // order of the rules it applies.
  template <class Out, class E, class Ctx, class F, class Hook>
  Out attempt_loop(const Ctx& ctx, F& call, detail::Trace& trace, Hook& hook) const {
    constexpr bool kHasRetry = kRetry >= 0;
    constexpr bool kHasTimeout = kTimeout >= 0;
    using T = typename Out::value_type;

    AttemptInfo info;
    [[maybe_unused]] std::string key;
    [[maybe_unused]] auto* retry = [&] {
      if constexpr (kHasRetry) {
        return std::get<kRetry>(stages_).retry;
      } else {
        return static_cast<void*>(nullptr);
      }
    }();
    using Ticket = decltype([] {
      if constexpr (kHasRetry) {
        using RetryT = std::remove_pointer_t<
            decltype(std::get<kRetry>(std::declval<std::tuple<S...>&>()).retry)>;
        return std::optional<typename RetryT::budget_type::Ticket>();
      } else {
        return 0;
      }
    }());
    [[maybe_unused]] Ticket ticket{};
    if constexpr (kHasRetry) {
      if (retry->config().idempotency_key) {
        key = retry->config().idempotency_key();
        info.idempotency_key = key;
      }
      if (auto* budget = retry->budget()) budget->deposit();
    }

    std::optional<E> last_error;
    Nanos previous_delay = Nanos::zero();
    for (std::uint32_t n = 1;; ++n) {
      const Stage checker = n == 1 ? Stage::call : Stage::retry;
      if (ctx.stop_requested())
        return fail<E>(Reason::cancelled, checker, n - 1, std::move(last_error));
      if (ctx.expired())
        return fail<E>(Reason::deadline_exceeded, checker, n - 1, std::move(last_error));
      if (auto rejected = hook.before(n)) {
        return fail<E>(detail::reason_of(rejected->reason), Stage::breaker, n - 1,
                       std::move(last_error), rejected->retry_after);
      }
      if constexpr (kHasRetry) {
        if (ticket) ticket->commit();
        if (n > 1) retry->note_retry();
      }
      info.number = n;

      auto attempt = [&] {
        if constexpr (kHasTimeout) {
          return ctx.with_timeout(std::get<kTimeout>(stages_).timeout).with_attempt(&info);
        } else if constexpr (kHasRetry) {
          return ctx.with_attempt(&info);
        } else {
          return std::cref(ctx);
        }
      }();
      const Ctx& actx = attempt;

      [[maybe_unused]] Ticks started = 0;
      if constexpr (Hook::kActive) started = coarse_now_ticks(ctx.clock());
      auto elapsed = [&] {
        if constexpr (Hook::kActive) {
          return Nanos(std::max<Ticks>(0, coarse_now_ticks(ctx.clock()) - started));
        } else {
          return Nanos::zero();
        }
      };

#if defined(__cpp_exceptions)
      auto result = [&] {
        try {
          return invoke_call(call, actx);
        } catch (...) {
          trace.attempts = n;
          trace.last = Outcome::failure;
          hook.after(Outcome::failure, elapsed());
          throw;
        }
      }();
#else
      auto result = invoke_call(call, actx);
#endif
      trace.attempts = n;
      using Res = ResultTraits<std::remove_cvref_t<decltype(result)>>;
      if (Res::has_value(result)) {
        trace.last = Outcome::success;
        hook.after(Outcome::success, elapsed());
        if constexpr (std::is_void_v<T>) {
          return Out();
        } else {
          return Out(Res::take_value(std::move(result)));
        }
      }

      auto& error = Res::error(result);
      const Outcome outcome = ErrorTraits<E>::outcome(error);
      trace.last = outcome;
      hook.after(outcome, elapsed());
      const std::optional<Nanos> hint = ErrorTraits<E>::retry_after(error);
      const Nanos hint_or_zero = hint ? *hint : Nanos::zero();
      bool timed_out = false;
      if constexpr (kHasTimeout) timed_out = actx.deadline() < ctx.deadline() && actx.expired();
      const Reason own = timed_out ? Reason::timeout : Reason::call_error;
      const Stage own_stage = timed_out ? Stage::timeout : Stage::call;

      if constexpr (!kHasRetry) {
        return fail<E>(own, own_stage, n, std::optional<E>(std::move(error)), hint_or_zero,
                       timed_out);
      } else {
        const auto& stage = std::get<kRetry>(stages_);
        auto stop = [&](Reason reason) {
          return fail<E>(reason, Stage::retry, n, std::optional<E>(std::move(error)), hint_or_zero,
                         timed_out);
        };
        if (!stage.retry_on(std::as_const(error))) {
          return fail<E>(own, own_stage, n, std::optional<E>(std::move(error)), hint_or_zero,
                         timed_out);
        }
        if (ctx.stop_requested()) {
          retry->note_cancelled();
          return stop(Reason::cancelled);
        }
        const RetryPolicy& policy = retry->policy();
        const Ticks now = ctx.has_deadline() ? ctx.now() : 0;
        if (ctx.deadline().passed(now)) {
          retry->note_deadline_stop();
          return stop(Reason::deadline_exceeded);
        }
        const bool use_hint = hint && policy.config().honor_retry_after;
        const std::uint64_t bits = policy.needs_random() && !use_hint ? policy.random_bits() : 0;
        const RetryDecision decision =
            policy.decide(n, previous_delay, hint, now, ctx.deadline(), bits);
        switch (decision.verdict) {
          case RetryDecision::Verdict::exhausted:
            retry->note_exhausted();
            return stop(Reason::retries_exhausted);
          case RetryDecision::Verdict::deadline_exceeded:
            retry->note_deadline_stop();
            return stop(Reason::deadline_exceeded);
          case RetryDecision::Verdict::retry:
            break;
        }
        if (auto* budget = retry->budget()) {
          auto granted = budget->try_withdraw();
          if (!granted) {
            retry->note_budget_stop();
            return stop(Reason::budget_exhausted);
          }
          ticket.emplace(std::move(*granted));  // spent while we wait; refunded if no retry follows
        }
        last_error.emplace(std::move(error));
        if (!retry->sleeper().sleep_for(decision.delay, ctx.stop_token())) {
          retry->note_cancelled();
          return fail<E>(Reason::cancelled, Stage::retry, n, std::move(last_error), hint_or_zero,
                         timed_out);
        }
        previous_delay = decision.delay;
      }
    }
  }

  std::tuple<S...> stages_;
};

// Composes stages, outermost first: fallback, rate_limit, breaker, throttle, bulkhead,
// retry, timeout (any subset, in that order).
template <class... S>
constexpr Pipeline<std::decay_t<S>...> pipeline(S&&... stages) {
  return Pipeline<std::decay_t<S>...>(std::forward<S>(stages)...);
}

}  // namespace bulwark

#endif  // BULWARK_PIPELINE_H_
