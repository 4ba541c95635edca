// bulwark/asio/pipeline.h — the resilience pipeline as a C++20 coroutine over Asio.
//
// The synchronous pipeline (bulwark/pipeline.h) sleeps its thread through a retry's
// backoff, blocks it on a full bulkhead, and can only tell a call how much time it
// has. This one is an asio::awaitable: the backoff waits on a timer of the caller's
// executor, the bulkhead queues suspended coroutines (AsyncBulkhead), and a
// per-attempt timeout or the request deadline *cancels* the attempt through Asio's
// per-operation cancellation — its socket operations are aborted. The stages, their
// order and the Failure result are the synchronous pipeline's, plus hedging:
//
//   fallback ∘ rate_limit ∘ breaker ∘ throttle ∘ bulkhead ∘ retry ∘ hedge ∘ timeout ∘ call
//
// (rate_limit: bulwark::rate_limit never waits; bulwark::asio::rate_limit waits on a
// timer for a permit due before the deadline — rate_limit.h. throttle: throttle.h.)
//
//   auto call_reviews = bulwark::asio::pipeline(
//       bulwark::fallback(Reviews::omitted(), Reasons::all().except(Reasons::breaker())),
//       bulwark::breaker(reviews_breaker),          // a BreakerLike: one outcome per call
//       bulwark::asio::bulkhead(reviews_pool),      // an AsyncBulkhead: waiters queue
//       bulwark::retry(reviews_retry),              // backoff on a timer, budget
//       bulwark::asio::hedge({.max_hedges = 1}),    // optional (hedge.h)
//       bulwark::timeout(300ms));                   // cancels the attempt
//
//   bulwark::Context ctx(bulwark::SteadyClock{}, {}, bulwark::Deadline::after(clock, 1s));
//   auto page = co_await call_reviews(ctx, [&](const bulwark::Context& c)
//       -> asio::awaitable<bulwark::Expected<Reviews, HttpError>> {
//     co_return co_await client.get("/reviews", c);     // honours asio cancellation
//   });
//
// The call. `call(const BasicContext<C>&)` (or `call()`) returns
// asio::awaitable<Expected<T, E>>: any awaitable call that honours Asio cancellation
// (its operations use the coroutine's cancellation slot, as use_awaitable does). Errors
// are classified by bulwark::ErrorTraits<E> as in the synchronous pipeline. An
// exception from the call propagates as there (a failure for the breaker, not
// retried), except from an attempt the pipeline itself cancelled, where it is what a
// cancelled operation does: such an attempt timed out (or lost a hedge race).
//
// Timeouts and deadlines. An attempt runs with a child context whose deadline is the
// earlier of the request's and `timeout` after the attempt started. When that passes
// the pipeline emits a terminal cancellation to the attempt and waits for it to end.
// An attempt timed out only if the pipeline cancelled it: a failure after the
// cancellation (an error, or an exception from an aborted operation) is a timeout —
// a failure for the breaker, retried within the deadline — and a success that made
// it anyway is a success. An answer the pipeline saw before it emitted the
// cancellation is the attempt's own, judged as such (success, ignored error,
// failure) even if it arrived after the deadline. When the request's deadline cut
// the attempt, the call ends with deadline_exceeded. Without a timeout stage, a
// deadline or hedging, the attempt is awaited directly: no timer, no extra coroutine.
//
// Cancellation by the caller (the awaiting coroutine's cancellation slot: a parent
// operation cancelled, a connection closed, asio's || operator) cancels the attempt,
// a backoff or a bulkhead wait at once; the call ends with Reason::cancelled, every
// permit is released as cancelled (a breaker permit unrecorded, a bulkhead slot
// given back, a budget ticket refunded) and it never counts as a failure. The
// context's std::stop_token is checked between stages, before each attempt; it does
// not interrupt one (use Asio's cancellation for that).
//
// Threading. A call runs on the awaiting coroutine's executor: its attempts, hedges
// and timers are started there, and their cancellation is emitted there. On a
// multi-threaded io_context, give each coroutine a strand (co_spawn(make_strand(io),
// ...)), as Asio's own awaitable operators require; the breaker, bulkhead, retry,
// budget and latency tracker are shared by every call on every thread, and all are
// thread-safe. The pipeline holds references to them and copies of the fallback,
// timeout and hedge stages.
//
// Lifetimes. The breaker, bulkhead, retry (and its budget), a hedge's budget and
// latency tracker, and the pipeline itself must outlive every call made through it.
// The io_context may be destroyed while calls are pending: each one's coroutines
// (the pipeline's, its attempts', the call's own) are destroyed without completing,
// and what they hold goes back as for a cancelled call — the breaker permit
// unrecorded (counted cancelled), the bulkhead slot freed, a retry ticket refunded;
// a started hedge's token stays spent, nothing is recorded in the tracker or the
// retry's statistics (tests/asio/asio_pipeline_lifetime_test.cc).
//
// Hedging (hedge.h). The first success of a group to end wins as soon as it ends,
// however it ends (a call that answers without suspending included); the others are
// cancelled, and the latency recorded is the winner's own. An attempt's own answer
// stands unless the pipeline cancelled it. An attempt cut before its coroutine first
// ran (an executor whose dispatch defers it) ends without calling; a hedge so cut
// keeps its token.
//
// Cost of a call that succeeds first time. Without a timeout, a deadline or hedging:
// the synchronous pipeline's atomics and two coroutine frames (the pipeline's and the
// call's), which Asio's per-thread frame cache serves — no allocation, no lock once
// warm (tests/asio/asio_hot_path_test.cc) — and no clock read unless the breaker is
// per attempt (a per-call permit is recorded with a zero duration: a breaker that
// judges slowness measures the call itself, as in the synchronous pipeline). With a
// deadline or a timeout, also a spawned attempt coroutine: six frames in all, more
// than the cache holds (two; a program may raise ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE),
// so some are allocated, and the attempt's empty completion is posted; the group's
// timer is made and armed only if the attempt does not end at once.
// bench/asio/async_pipeline_bench.cc counts both.

#ifndef BULWARK_ASIO_PIPELINE_H_
#define BULWARK_ASIO_PIPELINE_H_

#include <algorithm>
#include <array>
#include <asio/awaitable.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/cancellation_state.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "bulwark/asio/bulkhead.h"
#include "bulwark/asio/detail/pipeline_parts.h"
#include "bulwark/asio/hedge.h"
#include "bulwark/asio/rate_limit.h"
#include "bulwark/asio/timer.h"
#include "bulwark/context.h"
#include "bulwark/expected.h"
#include "bulwark/fallback.h"
#include "bulwark/pipeline.h"

namespace bulwark::asio {

// The bulkhead stage: an AsyncBulkhead on the context's clock. A caller finding it
// full queues (up to max_queue, max_wait, the deadline), suspended.
template <class H>
struct BulkheadStage {
  static constexpr int kAsyncRank = 20;
  using clock_type = typename H::clock_type;
  H* bulkhead;
};
template <class C>
constexpr BulkheadStage<BasicAsyncBulkhead<C>> bulkhead(BasicAsyncBulkhead<C>& b) noexcept {
  return {&b};
}

template <class... S>
class Pipeline {
  static_assert(detail::strictly_ranked<S...>(),
                "bulwark::asio::pipeline: stages go outermost first, each at most once: "
                "fallback, rate_limit, breaker, throttle, bulkhead, retry, hedge, timeout");
  static_assert((!detail::IsCoreBulkheadStage<S>::value && ...),
                "bulwark::asio::pipeline: a bulwark::Bulkhead blocks its thread while it waits; "
                "use a bulwark::asio::AsyncBulkhead with bulwark::asio::bulkhead()");

  static constexpr int kFallback = detail::index_of_rank<0, S...>();
  static constexpr int kRateLimit = detail::index_of_rank<5, S...>();
  static constexpr int kBreaker = detail::index_of_rank<10, S...>();
  static constexpr int kThrottle = detail::index_of_rank<15, S...>();
  static constexpr int kBulkhead = detail::index_of_rank<20, S...>();
  static constexpr int kRetry = detail::index_of_rank<30, S...>();
  static constexpr int kHedge = detail::index_of_rank<35, S...>();
  static constexpr int kTimeout = detail::index_of_rank<40, S...>();
  static constexpr bool kHasRetry = kRetry >= 0;
  static constexpr bool kHasHedge = kHedge >= 0;
  static constexpr bool kHasTimeout = kTimeout >= 0;
  // The bulkhead's place taken by an adaptive limit (bulwark::adaptive_limit()).
  static constexpr bool kAdaptive = [] {
    if constexpr (kBulkhead >= 0) {
      return requires(std::tuple_element_t<kBulkhead, std::tuple<S...>> s) { s.limiter; };
    } else {
      return false;
    }
  }();
  static constexpr std::size_t kChildren = kHasHedge ? kMaxHedges + 1 : 1;

  template <class C, class F>
  using Call = detail::AwaitableTraits<detail::call_awaitable_t<F, BasicContext<C>>>;

 public:
  constexpr explicit Pipeline(S... stages) : stages_(std::move(stages)...) {}

  // Runs `call` through the stages on the awaiting coroutine's executor. `ctx` and
  // `call` are copied into the coroutine frame. Every stage must run on the context's
  // clock type (a compile-time error otherwise), and with a ManualClock that clock must
  // be the one bound to ManualTimerClock (timer.h).
  template <Clock C, class F>
  auto execute(BasicContext<C> ctx, F call) const
      -> ::asio::awaitable<Expected<typename Call<C, F>::value_type::value_type,
                                    Failure<typename Call<C, F>::value_type::error_type>>,
                           typename Call<C, F>::executor_type> {
    static_assert(Call<C, F>::kIsAwaitable,
                  "bulwark::asio::pipeline: the call must return asio::awaitable<Expected<T, E>>");
    static_assert(bulwark::detail::IsBulwarkExpected<typename Call<C, F>::value_type>::value,
                  "bulwark::asio::pipeline: the call must return asio::awaitable<Expected<T, E>>");
    static_assert(detail::runs_on<kRateLimit, C, S...>() && detail::runs_on<kThrottle, C, S...>() &&
                      detail::runs_on<kBreaker, C, S...>() &&
                      detail::runs_on<kBulkhead, C, S...>() && detail::runs_on<kRetry, C, S...>() &&
                      detail::runs_on<kHedge, C, S...>(),
                  "bulwark::asio::pipeline: every stage's clock_type must be the context's clock");
    using Ex = typename Call<C, F>::executor_type;
    using R = typename Call<C, F>::value_type;
    using T = typename R::value_type;
    using E = typename R::error_type;
    using Out = Expected<T, Failure<E>>;
    assert(detail::timers_read(ctx.clock()) &&
           "a ManualClock context needs its clock bound to ManualTimerClock (timer.h)");

    const auto cs = co_await ::asio::this_coro::cancellation_state;
    // The fallback, outside every other stage: it answers for what they refused.
    auto fall = [this](Out&& o) -> Out {
      if constexpr (kFallback >= 0) {
        if (!o) return std::get<kFallback>(stages_).template apply<Out>(std::move(o).error());
      }
      return std::move(o);
    };

    // The rate limiter (rate_limit.h): a permit now, or one due before the deadline,
    // waited for on a timer.
    if constexpr (kRateLimit >= 0) {
      if (auto refused = co_await take_rate_permit<Ex, E>(ctx, cs))
        co_return fall(std::move(*refused));
    }

    // The breaker: one permit for the call, or one per attempt. The permit (or the
    // rejection) is built in place: no move from a temporary (docs/architecture.md).
    [[maybe_unused]] bool per_attempt = false;
    auto permit = [&] {
      if constexpr (kBreaker >= 0) {
        return std::get<kBreaker>(stages_).breaker->try_acquire();
      } else {
        return 0;
      }
    }();
    if constexpr (kBreaker >= 0) {
      if (!permit) {
        co_return fall(fail<E>(bulwark::detail::reason_of(permit.error().reason), Stage::breaker, 0,
                               std::nullopt, permit.error().retry_after));
      }
      per_attempt = std::get<kBreaker>(stages_).scope == BreakerScope::attempt;
    }

    // Client-side throttling: a local rejection drops the breaker permit unrecorded.
    if constexpr (kThrottle >= 0) {
      if (!std::get<kThrottle>(stages_).throttle->try_acquire())
        co_return fall(fail<E>(Reason::throttled, Stage::throttle, 0, std::nullopt));
    }

    // The bulkhead: a free slot at once, or a place in its queue. Built in place, as
    // the breaker's permit.
    auto slot = [&] {
      if constexpr (kAdaptive) {
        return std::get<kBulkhead>(stages_).limiter->try_acquire();
      } else if constexpr (kBulkhead >= 0) {
        return std::get<kBulkhead>(stages_).bulkhead->take_if_free();
      } else {
        return 0;
      }
    }();
    if constexpr (kAdaptive) {
      // An adaptive limit (bulwark/adaptive_limit.h) never queues: admitted or refused.
      if (!slot) co_return fall(fail<E>(Reason::bulkhead_full, Stage::bulkhead, 0, std::nullopt));
    } else if constexpr (kBulkhead >= 0) {
      if (!slot) {
        if (detail::cancelled(cs) || ctx.stop_requested())
          co_return fall(fail<E>(Reason::cancelled, Stage::bulkhead, 0, std::nullopt));
        auto got = co_await std::get<kBulkhead>(stages_).bulkhead->acquire(
            ctx, ::asio::use_awaitable_t<Ex>());
        if (!got) {
          co_return fall(fail<E>(bulwark::detail::reason_of(got.error().reason), Stage::bulkhead, 0,
                                 std::nullopt));
        }
        slot.emplace(std::move(*got));
      }
    }

    // The retry loop (one attempt without a retry stage); retry.h lists its rules.
    AttemptInfo info;
    // Only a retry stage has an idempotency key or a ticket to keep.
    [[maybe_unused]] std::conditional_t<kHasRetry, std::string, char> key{};
    [[maybe_unused]] auto* retry = retry_ptr();
    using Ticket = typename BasicRetryBudget<C>::Ticket;
    [[maybe_unused]] std::conditional_t<kHasRetry, std::optional<Ticket>, char> ticket{};
    BasicRetryBudget<C>* budget = nullptr;
    if constexpr (kHasRetry) {
      if (retry->config().idempotency_key) {
        key = retry->config().idempotency_key();
        info.idempotency_key = key;
      }
      budget = retry->budget();
    }
    if constexpr (kHasHedge) {
      if (budget == nullptr) budget = std::get<kHedge>(stages_).budget;
    }
    if (budget != nullptr) budget->deposit();

    std::optional<E> last_error;
    Nanos previous_delay = Nanos::zero();
    std::uint32_t attempts = 0;
    Outcome last_outcome = Outcome::success;
    // Ends the call. A caller's cancellation drops the breaker permit unrecorded.
    auto finish = [&](Out&& o, std::optional<Outcome> outcome) -> Out {
      if constexpr (kBreaker >= 0) {
        if (!per_attempt && outcome && attempts > 0) permit->record(*outcome, Nanos::zero());
      }
      if constexpr (kThrottle >= 0) {
        const auto& t = std::get<kThrottle>(stages_);
        if (outcome && attempts > 0)
          t.throttle->record(o.has_value() || t.accepts(std::as_const(o.error())));
      }
      if constexpr (kHasRetry) retry->note_call(o.has_value(), attempts);
      if constexpr (kAdaptive) std::get<kBulkhead>(stages_).settle(*slot, o, attempts, outcome);
      return fall(std::move(o));
    };
    for (std::uint32_t n = 1;; ++n) {
      const Stage checker = n == 1 ? Stage::call : Stage::retry;
      if (detail::cancelled(cs) || ctx.stop_requested()) {
        co_return finish(fail<E>(Reason::cancelled, checker, n - 1, std::move(last_error)),
                         std::nullopt);
      }
      if (ctx.expired()) {
        co_return finish(fail<E>(Reason::deadline_exceeded, checker, n - 1, std::move(last_error)),
                         last_outcome);
      }
      if constexpr (kBreaker >= 0) {
        if (per_attempt && n > 1) {
          // The permit of the call's last attempt is already recorded: none to record.
          permit = std::get<kBreaker>(stages_).breaker->try_acquire();
          if (!permit) {
            co_return finish(
                fail<E>(bulwark::detail::reason_of(permit.error().reason), Stage::breaker, n - 1,
                        std::move(last_error), permit.error().retry_after),
                std::nullopt);
          }
        }
      }
      if constexpr (kHasRetry) {
        if (ticket) ticket->commit();
        if (n > 1) retry->note_retry();
      }
      info.number = n;

      detail::AttemptEnd<R> end;
      if (kHasTimeout || kHasHedge || ctx.has_deadline()) {
        end = co_await run_group<Ex, R>(ctx, call, info, budget, per_attempt);
      } else {
        // Awaited in place: the caller's cancellation reaches the call directly.
        const BasicContext<C> actx = ctx.with_attempt(&info);
        // Timed only for a per-attempt breaker: a per-call permit is recorded with zero
        // ("measure it yourself"), so a breaker that does not judge slowness costs no
        // clock read, as in the synchronous pipeline.
        const Ticks started = per_attempt ? coarse_now_ticks(ctx.clock()) : 0;
        try {
          end.result.emplace(co_await invoke_call(call, actx));
        } catch (...) {
          end.error = std::current_exception();
        }
        if (per_attempt) {
          end.elapsed = Nanos(std::max<Ticks>(0, coarse_now_ticks(ctx.clock()) - started));
        }
        if (detail::cancelled(cs) && !(end.result && *end.result)) {
          end.caller_cancelled = true;
          end.error = nullptr;
        }
      }
      attempts = n;

      if (end.caller_cancelled || (!end.result && !end.error && detail::cancelled(cs))) {
        // Neither a success nor a failure: every permit goes back unrecorded.
        if constexpr (kHasRetry) retry->note_cancelled();
        co_return finish(fail<E>(Reason::cancelled, Stage::call, n, std::move(last_error)),
                         std::nullopt);
      }
      if (end.error) {
        if constexpr (kBreaker >= 0) {
          permit->record(Outcome::failure, per_attempt ? end.elapsed : Nanos::zero());
        }
        if constexpr (kThrottle >= 0) std::get<kThrottle>(stages_).throttle->record(false);
        std::rethrow_exception(end.error);
      }
      if (end.result && *end.result) {
        if constexpr (kBreaker >= 0) {
          if (per_attempt) permit->record(Outcome::success, end.elapsed);
        }
        if constexpr (kHasHedge) {
          if (auto* t = std::get<kHedge>(stages_).config.record_to) t->record(end.elapsed);
        }
        if constexpr (std::is_void_v<T>) {
          co_return finish(Out(), Outcome::success);
        } else {
          co_return finish(Out(std::move(**end.result)), Outcome::success);
        }
      }

      // A failed attempt: its error (none when it was aborted and threw).
      std::optional<E> error;
      if (end.result) error.emplace(std::move(*end.result).error());
      const Outcome outcome = error && !end.timed_out && !end.deadline_cut
                                  ? ErrorTraits<E>::outcome(*error)
                                  : Outcome::failure;
      last_outcome = outcome;
      if constexpr (kBreaker >= 0) {
        if (per_attempt) permit->record(outcome, end.elapsed);
      }
      const std::optional<Nanos> hint =
          error ? ErrorTraits<E>::retry_after(*error) : std::optional<Nanos>();
      const Nanos hint_or_zero = hint ? *hint : Nanos::zero();
      const bool timed_out = end.timed_out;
      if (end.deadline_cut) {
        if constexpr (kHasRetry) retry->note_deadline_stop();
        co_return finish(fail<E>(Reason::deadline_exceeded, kHasRetry ? Stage::retry : Stage::call,
                                 n, std::move(error), hint_or_zero, timed_out),
                         outcome);
      }
      const Reason own = timed_out ? Reason::timeout : Reason::call_error;
      const Stage own_stage = timed_out ? Stage::timeout : Stage::call;

      if constexpr (!kHasRetry) {
        co_return finish(fail<E>(own, own_stage, n, std::move(error), hint_or_zero, timed_out),
                         outcome);
      } else {
        const auto& stage = std::get<kRetry>(stages_);
        auto stop = [&](Reason reason) {
          return finish(fail<E>(reason, Stage::retry, n, std::move(error), hint_or_zero, timed_out),
                        outcome);
        };
        // A timed-out attempt is a failure of the dependency, retried; an error the
        // call returned goes through the retry-on predicate.
        const bool retryable = error && !timed_out
                                   ? static_cast<bool>(stage.retry_on(std::as_const(*error)))
                                   : outcome == Outcome::failure;
        if (!retryable) {
          co_return finish(fail<E>(own, own_stage, n, std::move(error), hint_or_zero, timed_out),
                           outcome);
        }
        if (detail::cancelled(cs) || ctx.stop_requested()) {
          retry->note_cancelled();
          co_return finish(fail<E>(Reason::cancelled, Stage::retry, n, std::move(error),
                                   hint_or_zero, timed_out),
                           std::nullopt);
        }
        const RetryPolicy& policy = retry->policy();
        const Ticks now = ctx.now();
        if (ctx.deadline().passed(now)) {
          retry->note_deadline_stop();
          co_return stop(Reason::deadline_exceeded);
        }
        const bool use_hint = hint && policy.config().honor_retry_after;
        const std::uint64_t bits = policy.needs_random() && !use_hint ? policy.random_bits() : 0;
        const RetryDecision decision =
            policy.decide(n, previous_delay, hint, now, ctx.deadline(), bits);
        switch (decision.verdict) {
          case RetryDecision::Verdict::exhausted:
            retry->note_exhausted();
            co_return stop(Reason::retries_exhausted);
          case RetryDecision::Verdict::deadline_exceeded:
            retry->note_deadline_stop();
            co_return stop(Reason::deadline_exceeded);
          case RetryDecision::Verdict::retry:
            break;
        }
        if (auto* b = retry->budget()) {
          auto granted = b->try_withdraw();
          if (!granted) {
            retry->note_budget_stop();
            co_return stop(Reason::budget_exhausted);
          }
          ticket.emplace(std::move(*granted));  // spent while we wait; refunded if no retry
        }
        if (error) {
          last_error.emplace(std::move(*error));
        } else {
          last_error.reset();
        }
        if (decision.delay > Nanos::zero()) {
          const std::error_code ec =
              co_await wait_until<Ex, C>(saturating_add(now, decision.delay.count()));
          if (ec || detail::cancelled(cs)) {
            retry->note_cancelled();
            co_return finish(fail<E>(Reason::cancelled, Stage::retry, n, std::move(last_error),
                                     hint_or_zero, timed_out),
                             std::nullopt);
          }
        }
        previous_delay = decision.delay;
      }
    }
  }

  // execute(), so a pipeline reads as the function it wraps.
  template <Clock C, class F>
  auto operator()(BasicContext<C> ctx, F call) const {
    return execute(std::move(ctx), std::move(call));
  }

 private:
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

  template <class Ctx, class F>
  static decltype(auto) invoke_call(F& call, const Ctx& ctx) {
    if constexpr (std::is_invocable_v<F&, const Ctx&>) {
      return call(ctx);
    } else {
      return call();
    }
  }

  auto* retry_ptr() const noexcept {
    if constexpr (kHasRetry) {
      return std::get<kRetry>(stages_).retry;
    } else {
      return static_cast<void*>(nullptr);
    }
  }

  // The rate limit stage: nullopt when a permit was taken (after waiting for it, with
  // bulwark::asio::rate_limit), else the failure.
  template <class Ex, class E, class C>
  ::asio::awaitable<std::optional<Unexpected<Failure<E>>>, Ex> take_rate_permit(
      const BasicContext<C>& ctx, const ::asio::cancellation_state& cs) const {
    const auto& stage = std::get<kRateLimit>(stages_);
    using W = std::remove_pointer_t<decltype(stage.sleeper)>;
    static_assert(std::is_same_v<W, NoRateWait> || std::is_same_v<W, AsyncRateWait>,
                  "bulwark::asio::pipeline: a rate limit stage that waits must wait on a timer: "
                  "use bulwark::asio::rate_limit (a sleeper would block the executor's thread)");
    if constexpr (std::is_same_v<W, NoRateWait>) {
      auto ok = stage.limiter->try_acquire(stage.permits);
      if (!ok) {
        co_return fail<E>(Reason::rate_limited, Stage::rate_limiter, 0, std::nullopt,
                          ok.error().retry_after);
      }
    } else {
      if (detail::cancelled(cs) || ctx.stop_requested())
        co_return fail<E>(Reason::cancelled, Stage::rate_limiter, 0, std::nullopt);
      auto wait = stage.limiter->reserve(stage.permits, std::min(stage.max_wait, ctx.remaining()));
      if (!wait) {
        co_return fail<E>(Reason::rate_limited, Stage::rate_limiter, 0, std::nullopt,
                          wait.error().retry_after);
      }
      if (*wait > Nanos::zero()) {
        const std::error_code ec =
            co_await wait_until<Ex, C>(saturating_add(ctx.now(), wait->count()));
        if (ec || detail::cancelled(cs))
          co_return fail<E>(Reason::cancelled, Stage::rate_limiter, 0, std::nullopt);
      }
    }
    co_return std::nullopt;
  }

  // A backoff: a timer of its own coroutine, so that the call's frame stays small
  // enough for Asio's frame cache (and pays for the timer only when it retries).
  template <class Ex, class C>
  static ::asio::awaitable<std::error_code, Ex> wait_until(Ticks until) {
    Timer<C> t(co_await ::asio::this_coro::executor);
    t.expires_at(timer_time<C>(until));
    auto [ec] =
        co_await t.async_wait(::asio::experimental::as_tuple(::asio::use_awaitable_t<Ex>()));
    co_return ec;
  }

  // One attempt and its hedges, each a coroutine of its own on this executor, so that
  // each can be cancelled alone; a timer wakes this one for timeouts and hedges, and
  // each attempt's end cancels the timer. An attempt may end while it is started (its
  // call answered without suspending): every pass looks at the attempts that ended, in
  // the order they ended, before it waits again.
  template <class Ex, class R, class C, class F>
  ::asio::awaitable<detail::AttemptEnd<R>, Ex> run_group(const BasicContext<C>& ctx, F& call,
                                                         const AttemptInfo& info,
                                                         BasicRetryBudget<C>* budget,
                                                         bool per_attempt) const;

  // The body of one attempt's coroutine: the call (unless the group cut the attempt
  // before this ran), its answer or its exception kept, and its end told to the group (the last
  // thing it does: what is left of the coroutine after this touches nothing of the group's).
  template <class Ex, class R, class Child, class Ctx, class F>
  static ::asio::awaitable<void, Ex> run_child(Child& c, std::size_t& running, std::uint32_t& ends,
                                               std::optional<Timer<typename Ctx::clock_type>>& wake,
                                               const Ctx& group_ctx, F& call) {
    c.began = true;
    if (c.cut == detail::Cut::none) {  // else cancelled before it ran: never called
      try {
        c.result.emplace(co_await invoke_call(call, *c.ctx));
      } catch (...) {
        c.error = std::current_exception();
      }
    }
    c.running = false;
    if (c.timed) c.ended = group_ctx.now();
    c.order = ++ends;
    --running;
    if (wake) wake->cancel();
  }

  std::tuple<S...> stages_;
};

// Composes stages, outermost first: fallback, breaker, bulkhead, retry, hedge,
// timeout (any subset, in that order). The breaker, retry, timeout and fallback
// stages are the synchronous pipeline's (bulwark::breaker(), bulwark::retry(),
// bulwark::timeout(), bulwark::fallback()); the bulkhead and hedge are these.
template <class... S>
constexpr Pipeline<std::decay_t<S>...> pipeline(S&&... stages) {
  return Pipeline<std::decay_t<S>...>(std::forward<S>(stages)...);
}

}  // namespace bulwark::asio

// The definitions of the members declared above.
#include "bulwark/asio/detail/pipeline_impl.h"

#endif  // BULWARK_ASIO_PIPELINE_H_
