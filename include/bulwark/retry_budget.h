// bulwark/retry_budget.h — retries as a bounded fraction of requests.
//
// Retries without a budget feed retry storms: when a dependency fails,
// every caller multiplies its load by max_attempts exactly when it can least take it.
// A RetryBudget, shared by all callers of one dependency, caps retries at a ratio of
// the requests plus a small floor, as Finagle's RetryBudget, Envoy's retry budgets,
// gRPC's retry throttling and failsafe-go's budget do:
//
//   bulwark::RetryBudget budget({.name = "payments", .ratio = 0.2, .min_retries_per_second = 10});
//
//   budget.deposit();                        // once per logical request (first attempt)
//   if (auto ticket = budget.try_withdraw()) {
//     sleep(backoff);                        // the ticket is spent while we wait...
//     ticket->commit();                      // ...and kept once the retry starts
//   }                                        // dropped unused: refunded
//
// The algorithm: a token balance, in millionths of a retry, in one atomic word.
//   * Each request deposits `ratio` tokens, up to `max_tokens`. Over any stretch of
//     traffic, retries therefore stay within ratio x requests (+ the floor and the
//     saved-up balance, which `max_tokens` caps: that cap is what makes the budget
//     remember only recent requests without a clock read on the deposit path).
//   * The floor: `min_retries_per_second` tokens accrue with time, lazily, in the
//     withdraw path (nothing runs in the background), so a service with little traffic
//     can still retry. A new budget starts with one second of floor.
//   * A retry withdraws one whole token when it decides to retry, before its backoff,
//     so retries waiting in backoff already count against the budget. A retry that
//     never starts (cancelled or past its deadline while waiting) gets its token back.
//
// Cost: deposit() is one CAS on an uncontended cache line (the hot path of every
// request); try_withdraw() reads the coarse clock once and does two or three CAS.
// Lock-free (checked by a static_assert), allocation-free.
// Thread-safety: every member function may be called concurrently. A Ticket belongs
// to one retry; move it, don't share it.

#ifndef BULWARK_RETRY_BUDGET_H_
#define BULWARK_RETRY_BUDGET_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/detail/permit_base.h"
#include "bulwark/expected.h"

namespace bulwark {

struct RetryBudgetConfig {
  // Identifies the budget in errors and metrics.
  std::string name = "default";
  // Retries allowed per request (Finagle's percentCanRetry as a fraction). 0.2 lets
  // 20 retries through per 100 requests. Finite, >= 0.
  double ratio = 0.2;
  // The floor: retries allowed per second whatever the traffic (Finagle's
  // minRetriesPerSec). Finite, >= 0.
  double min_retries_per_second = 10.0;
  // The most tokens the budget saves up (gRPC's maxTokens): bounds the burst of
  // retries after a long quiet, healthy period. Finite, >= 1.
  double max_tokens = 100.0;
};

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const RetryBudgetConfig& config);

// try_withdraw() said no: the budget is spent.
struct BudgetExhausted {
  double tokens;  // the balance when the retry was refused (< 1)
};

struct RetryBudgetSnapshot {
  double tokens;            // current balance, in retries
  std::uint64_t withdrawn;  // retries admitted (tickets issued, minus refunds)
  std::uint64_t rejected;   // retries refused
  std::uint64_t refunded;   // tickets dropped before their retry started
};

template <Clock C = SteadyClock>
class BasicRetryBudget {
  struct TicketTraits {
    using Owner = BasicRetryBudget;
    struct Data {};
    static void abandon(BasicRetryBudget& b, const Data&) noexcept { b.give_back(); }
  };

 public:
  using clock_type = C;
  static constexpr std::int64_t kUnit = 1'000'000;  // tokens are kept in millionths

  // A withdrawn retry. Move-only. commit() when the retry starts; destroyed without
  // commit() it refunds its token.
  class [[nodiscard]] Ticket : public detail::PermitBase<typename BasicRetryBudget::TicketTraits> {
   public:
    // The retry is happening: the token is spent for good.
    void commit() noexcept { (void)this->take(); }

   private:
    friend class BasicRetryBudget;
    explicit Ticket(BasicRetryBudget* b) noexcept
        : detail::PermitBase<typename BasicRetryBudget::TicketTraits>(b, {}) {}
  };

  // Validates `config` (throws InvalidConfig naming the field). A stateful clock must
  // outlive the budget.
  explicit BasicRetryBudget(RetryBudgetConfig config) requires std::is_empty_v<C>
      : BasicRetryBudget(std::move(config), detail::ClockRef<C>()) {}
  BasicRetryBudget(RetryBudgetConfig config, const C& clock)
      : BasicRetryBudget(std::move(config), detail::ClockRef<C>(clock)) {}
  BasicRetryBudget(RetryBudgetConfig, const C&&) = delete;
  BasicRetryBudget(const BasicRetryBudget&) = delete;
  BasicRetryBudget& operator=(const BasicRetryBudget&) = delete;

  // Counts one request (a logical operation's first attempt). One CAS; no clock read.
  void deposit() noexcept {
    if (deposit_ == 0) return;
    std::int64_t cur = balance_.load(std::memory_order_relaxed);
    // Skip the write when full: a healthy service's deposits then cost one load.
    while (cur < cap_) {
      const std::int64_t next = std::min(cap_, cur + deposit_);
      if (balance_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) return;
    }
  }

  // Asks for one retry. Never blocks; reads the coarse clock once to accrue the floor.
  Expected<Ticket, BudgetExhausted> try_withdraw() noexcept {
    accrue_floor();
    std::int64_t cur = balance_.load(std::memory_order_relaxed);
    while (cur >= kUnit) {
      if (balance_.compare_exchange_weak(cur, cur - kUnit, std::memory_order_relaxed)) {
        withdrawn_.fetch_add(1, std::memory_order_relaxed);
        return Ticket(this);
      }
    }
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return Unexpected(BudgetExhausted{static_cast<double>(cur) / kUnit});
  }

  // The balance in retries (fractional). One load plus the floor accrual.
  double tokens() noexcept {
    accrue_floor();
    return static_cast<double>(balance_.load(std::memory_order_relaxed)) / kUnit;
  }

  // The balance (as tokens(), so it may accrue the floor) and the totals: a few
  // relaxed loads, no lock. Any thread.
  RetryBudgetSnapshot snapshot() noexcept {
    return {tokens(), withdrawn_.load(std::memory_order_relaxed),
            rejected_.load(std::memory_order_relaxed), refunded_.load(std::memory_order_relaxed)};
  }

  // The configuration as given. Constant; free.
  const RetryBudgetConfig& config() const noexcept { return config_; }

 private:
  BasicRetryBudget(RetryBudgetConfig config, detail::ClockRef<C> clock)
      : config_(detail::validated(std::move(config))),
        clock_(clock),
        deposit_(static_cast<std::int64_t>(config_.ratio * kUnit + 0.5)),
        cap_(static_cast<std::int64_t>(config_.max_tokens * kUnit + 0.5)),
        floor_rate_(static_cast<std::uint64_t>(config_.min_retries_per_second * kUnit + 0.5)) {
    const long double first_second =
        static_cast<long double>(config_.min_retries_per_second) * kUnit;
    balance_.store(static_cast<std::int64_t>(
                       std::min<long double>(first_second, static_cast<long double>(cap_))),
                   std::memory_order_relaxed);
    last_accrual_.store(coarse_now_ticks(clock_.get()), std::memory_order_relaxed);
  }

  // The floor accrues with time. Whoever wins the CAS on last_accrual_ adds the tokens
  // for the time it claimed; the others see the time already claimed and add nothing.
  // Integer arithmetic, and only the time that bought whole millionths is claimed, so
  // frequent small accruals lose nothing. A clock that steps back is no time passing.
  void accrue_floor() noexcept {
    if (floor_rate_ == 0) return;
    const Ticks now = coarse_now_ticks(clock_.get());
    Ticks last = last_accrual_.load(std::memory_order_relaxed);
    if (now <= last) return;
    __extension__ using u128 = unsigned __int128;
    constexpr std::uint64_t kNanosPerSecond = 1'000'000'000;
    const auto elapsed = static_cast<std::uint64_t>(now - last);
    const u128 earned = static_cast<u128>(elapsed) * floor_rate_ / kNanosPerSecond;
    if (earned == 0) return;  // leave the time unclaimed until it buys a millionth
    Ticks claimed_until = now;
    std::int64_t add = cap_;
    if (earned < static_cast<u128>(cap_)) {
      add = static_cast<std::int64_t>(earned);
      // ceil(earned * 1e9 / rate) <= elapsed: the time those tokens took to earn.
      const u128 spent = (earned * kNanosPerSecond + floor_rate_ - 1) / floor_rate_;
      claimed_until = last + static_cast<Ticks>(spent);
    }
    if (!last_accrual_.compare_exchange_strong(last, claimed_until, std::memory_order_relaxed))
      return;
    std::int64_t cur = balance_.load(std::memory_order_relaxed);
    while (cur < cap_ && !balance_.compare_exchange_weak(cur, std::min(cap_, cur + add),
                                                         std::memory_order_relaxed)) {
    }
  }

  void give_back() noexcept {
    refunded_.fetch_add(1, std::memory_order_relaxed);
    withdrawn_.fetch_sub(1, std::memory_order_relaxed);
    // A refund may exceed the cap by nothing: the token came from this balance.
    std::int64_t cur = balance_.load(std::memory_order_relaxed);
    while (!balance_.compare_exchange_weak(cur, std::min(cap_, cur + kUnit),
                                           std::memory_order_relaxed)) {
    }
  }

  const RetryBudgetConfig config_;
  [[no_unique_address]] const detail::ClockRef<C> clock_;
  const std::int64_t deposit_;
  const std::int64_t cap_;
  const std::uint64_t floor_rate_;  // millionths of a retry per second
  alignas(64) std::atomic<std::int64_t> balance_{0};
  std::atomic<Ticks> last_accrual_{0};
  std::atomic<std::uint64_t> withdrawn_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> refunded_{0};

  static_assert(std::atomic<std::int64_t>::is_always_lock_free);
};

using RetryBudget = BasicRetryBudget<SteadyClock>;

}  // namespace bulwark

#endif  // BULWARK_RETRY_BUDGET_H_
