// bulwark/retry.h — when to try again, and how long to wait first.
//
// Two layers, so that a discrete-event simulator can drive the same decisions step by
// step that the blocking loop takes:
//
//   RetryPolicy   a validated value: decide() answers, for a failed attempt, "retry
//                 after d", "attempts exhausted" or "it would end past the deadline".
//                 Pure: no clock read, no sleep, no shared state.
//   BasicRetry    the policy plus a clock, a sleeper and an optional shared
//                 RetryBudget: what the pipeline's retry stage runs (see pipeline.h).
//
//   bulwark::RetryBudget budget({.name = "payments"});
//   bulwark::Retry retry({.name = "payments",
//                         .max_attempts = 4,
//                         .backoff = bulwark::Backoff::exponential(100ms, 2.0, 2s)
//                                        .with_jitter(bulwark::Jitter::full)},
//                        &budget);
//   auto result = bulwark::pipeline(bulwark::retry(retry)).execute(ctx, call);
//
//   // step by step (the simulator):
//   auto d = retry.policy().decide(attempts, previous_delay, server_hint, now, deadline, bits);
//   if (d) { auto ticket = budget.try_withdraw(); ... schedule the next attempt at now + d.delay
//   ... }
//
// Rules the loop follows after a failed attempt, in this order (pipeline.h applies
// them; docs/resilience.md lists them too):
//   1. a non-retryable or ignored error (a 4xx) ends the call (call_error, or timeout);
//   2. a cancelled request ends it (cancelled), and so does a deadline that has
//      already passed (deadline_exceeded);
//   3. max_attempts ends it (retries_exhausted);
//   4. the next delay is the server's retry-after hint when the error carries one (it
//      replaces the schedule, no jitter), else the backoff; if now + delay reaches the
//      deadline the call ends at once (deadline_exceeded: no sleep starts that could
//      not be followed by an attempt);
//   5. the budget must grant a token (budget_exhausted);
//   6. the sleep wakes at once on cancellation (cancelled).
// Every early end returns the last attempt's error.
//
// Names follow Resilience4j: max_attempts counts the first call (3 = 1 call + 2
// retries), where Polly's MaxRetryAttempts would be 2.
//
// Thread-safety: RetryPolicy and BasicRetry are immutable after construction (the
// counters are atomics); share one per dependency across threads. The random source
// must be thread-safe if given (the default is per-thread).

#ifndef BULWARK_RETRY_H_
#define BULWARK_RETRY_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "bulwark/backoff.h"
#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/context.h"
#include "bulwark/detail/ledger.h"
#include "bulwark/expected.h"
#include "bulwark/retry_budget.h"
#include "bulwark/sleeper.h"

namespace bulwark {

struct RetryConfig {
  // Identifies the retry in errors and metrics.
  std::string name = "default";
  // Attempts in all, including the first. >= 1 (1 turns retrying off).
  std::uint32_t max_attempts = 3;
  // The wait before each retry. The default is the AWS recommendation: exponential
  // with full jitter.
  Backoff backoff =
      Backoff::exponential(std::chrono::milliseconds(100), 2.0, std::chrono::seconds(10))
          .with_jitter(Jitter::full);
  // Let a delay the dependency asked for (an HTTP Retry-After, a gRPC pushback), when
  // the error reports one, replace the backoff.
  bool honor_retry_after = true;
  // Makes the idempotency key of one logical operation, once, before its first
  // attempt; every attempt sees the same key in Context::idempotency_key(). Empty: no
  // key. Costs one call (and usually one allocation) per operation that sets it.
  // Called concurrently by every thread using the retry: it must be thread-safe.
  std::function<std::string()> idempotency_key = {};
  // Random bits for jitter; empty: a per-thread generator. Inject a seeded one for
  // reproducible tests and simulations.
  RandomSource random = {};
};

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const RetryConfig& config);

// What decide() concluded.
struct RetryDecision {
  enum class Verdict : std::uint8_t {
    retry,              // wait `delay`, then make the next attempt
    exhausted,          // max_attempts reached
    deadline_exceeded,  // waiting `delay` would reach the deadline
  };
  Verdict verdict;
  Nanos delay;  // the wait that was computed (also when it did not fit the deadline)
  std::optional<Nanos> hint = {};

  explicit operator bool() const noexcept { return verdict == Verdict::retry; }
};

class RetryPolicy {
 public:
  // Validates (throws InvalidConfig naming the field).
  explicit RetryPolicy(RetryConfig config);

  // After `attempts` attempts (>= 1) whose last one failed retryably at `now`: retry,
  // and after how long? `previous_delay` is the wait before the last attempt (zero
  // after the first), used by decorrelated jitter; `retry_after` the dependency's own
  // hint, if any; `random` 64 random bits for jitter. Pure and constant-time.
  RetryDecision decide(std::uint32_t attempts, Nanos previous_delay,
                       std::optional<Nanos> retry_after, Ticks now, Deadline deadline,
                       std::uint64_t random) const noexcept {
    if (attempts >= config_.max_attempts) return {RetryDecision::Verdict::exhausted, Nanos::zero()};
    Nanos delay;
    std::optional<Nanos> hint;
    if (retry_after && config_.honor_retry_after) {
      delay = std::max(*retry_after, Nanos::zero());
      hint = delay;
    } else {
      delay = config_.backoff.delay(attempts, previous_delay, random);
    }
    if (!deadline.is_never() && saturating_add(now, delay.count()) >= deadline.ticks()) {
      return {RetryDecision::Verdict::deadline_exceeded, delay, hint};
    }
    return {RetryDecision::Verdict::retry, delay, hint};
  }

  // True if decide() reads its `random` argument (jittered backoff).
  bool needs_random() const noexcept { return config_.backoff.jitter() != Jitter::none; }
  // 64 random bits from the configured source (or the per-thread generator).
  std::uint64_t random_bits() const { return config_.random ? config_.random() : thread_random(); }

  // The configuration as given, and its attempt limit. Constant; free.
  const RetryConfig& config() const noexcept { return config_; }
  std::uint32_t max_attempts() const noexcept { return config_.max_attempts; }

 private:
  RetryConfig config_;
};

// Totals since the retry was built. A call through a retry stage that reached its
// first attempt is counted once, by how it ended (Resilience4j's four kinds; a call the
// breaker, the bulkhead, a cancellation or the deadline stopped before any attempt is
// not): one add to a per-thread counter per call (no write other cores read). The other
// counters move only on the retry path.
struct RetrySnapshot {
  std::uint64_t retries;         // retries started
  std::uint64_t exhausted;       // calls that ran out of attempts
  std::uint64_t deadline_stops;  // calls ended because the next retry would miss the deadline
  std::uint64_t budget_stops;    // calls ended because the budget refused a retry
  std::uint64_t cancelled;       // calls cancelled between attempts
  std::uint64_t successful_without_retry = 0;
  std::uint64_t successful_with_retry = 0;
  std::uint64_t failed_with_retry = 0;
  std::uint64_t failed_without_retry = 0;
};

template <Clock C = SteadyClock, Sleeper S = ThreadSleeper>
class BasicRetry {
  static_assert(detail::sleeper_runs_on<S, C>(),
                "bulwark::BasicRetry: the sleeper's clock_type must be the retry's clock "
                "(a ManualClock retry needs a ManualSleeper; ThreadSleeper sleeps in real time)");

 public:
  using clock_type = C;
  using sleeper_type = S;
  using budget_type = BasicRetryBudget<C>;

  // For clocks without state (SteadyClock) and default-constructible sleepers.
  explicit BasicRetry(RetryConfig config, budget_type* budget = nullptr) requires
      std::is_empty_v<C> && std::is_default_constructible_v<S>
      : policy_(std::move(config)), clock_(), sleeper_(), budget_(budget) {}
  // `clock`, and `budget` if given, must outlive the retry. A budget is shared by all
  // retries of one dependency.
  BasicRetry(RetryConfig config, const C& clock, S sleeper, budget_type* budget = nullptr)
      : policy_(std::move(config)), clock_(clock), sleeper_(std::move(sleeper)), budget_(budget) {}
  BasicRetry(RetryConfig, const C&&, S, budget_type* = nullptr) = delete;
  BasicRetry(const BasicRetry&) = delete;
  BasicRetry& operator=(const BasicRetry&) = delete;

  // What the retry was built with: its policy, budget (nullptr if none), sleeper, clock
  // and configuration. Constant (the sleeper is the retry's own); free; any thread.
  const RetryPolicy& policy() const noexcept { return policy_; }
  budget_type* budget() const noexcept { return budget_; }
  S& sleeper() noexcept { return sleeper_; }
  decltype(auto) clock() const noexcept { return clock_.get(); }
  const RetryConfig& config() const noexcept { return policy_.config(); }

  // The totals (RetrySnapshot): relaxed loads plus a fold of the per-thread call
  // counters (detail/ledger.h); no lock, changes nothing. Any thread.
  RetrySnapshot snapshot() const noexcept {
    const auto calls = calls_.read();
    return {retries_.load(std::memory_order_relaxed),
            exhausted_.load(std::memory_order_relaxed),
            deadline_stops_.load(std::memory_order_relaxed),
            budget_stops_.load(std::memory_order_relaxed),
            cancelled_.load(std::memory_order_relaxed),
            calls[0],
            calls[1],
            calls[2],
            calls[3]};
  }

  // Counters the retry stage bumps as it goes (public so a simulator driving the
  // policy by hand can keep them too). Relaxed atomic adds.
  void note_retry() noexcept { retries_.fetch_add(1, std::memory_order_relaxed); }
  void note_exhausted() noexcept { exhausted_.fetch_add(1, std::memory_order_relaxed); }
  void note_deadline_stop() noexcept { deadline_stops_.fetch_add(1, std::memory_order_relaxed); }
  void note_budget_stop() noexcept { budget_stops_.fetch_add(1, std::memory_order_relaxed); }
  void note_cancelled() noexcept { cancelled_.fetch_add(1, std::memory_order_relaxed); }
  // One call ended after `attempts` attempts (0: it never reached the dependency, and
  // is not counted), successfully or not.
  void note_call(bool succeeded, std::uint32_t attempts) noexcept {
    if (attempts == 0) return;
    const std::size_t kind = succeeded ? (attempts > 1 ? 1 : 0) : (attempts > 1 ? 2 : 3);
    calls_.add(kind);
  }

 private:
  RetryPolicy policy_;
  [[no_unique_address]] detail::ClockRef<C> clock_;
  [[no_unique_address]] S sleeper_;
  budget_type* budget_;
  std::atomic<std::uint64_t> retries_{0};
  std::atomic<std::uint64_t> exhausted_{0};
  std::atomic<std::uint64_t> deadline_stops_{0};
  std::atomic<std::uint64_t> budget_stops_{0};
  std::atomic<std::uint64_t> cancelled_{0};
  // successful without / with retry, failed with / without retry (RetrySnapshot's order),
  // counted per thread (detail/ledger.h): a call writes nothing other cores read.
  alignas(64) detail::PerThreadTotals calls_;
};

using Retry = BasicRetry<SteadyClock, ThreadSleeper>;

}  // namespace bulwark

#endif  // BULWARK_RETRY_H_
