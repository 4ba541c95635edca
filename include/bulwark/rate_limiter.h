// bulwark/rate_limiter.h — at most N permits per period, in one atomic word.
//
// A rate limiter caps how often a caller may do something (call a dependency, accept
// a request), whatever the dependency's health: it protects a quota, not a failing
// service (docs/rate-limiting.md says when to use which stage).
//
//   bulwark::RateLimiter api({.name = "search", .permits = 100, .period = 1s});  // smooth
//   bulwark::RateLimiter bulk({.name = "export", .mode = bulwark::RateLimitMode::bursty,
//                              .permits = 10, .period = 1s, .capacity = 50});
//
//   if (auto ok = api.try_acquire(); !ok) {
//     respond(429, {{"Retry-After", seconds(ok.error().retry_after)}});
//   }
//
// Two modes, one algorithm (the generic cell rate algorithm, GCRA):
//   smooth  permits are spaced evenly, one every period/permits (the emission
//           interval T); a request may come up to `tolerance` early, so at most
//           floor(tolerance / T) + 1 are admitted back to back.
//   bursty  a token bucket of `capacity` permits refilled at permits/period,
//           continuously; it starts full. A token bucket of capacity C is GCRA with a
//           tolerance of (C - 1)·T, so it is kept the same way.
// The one word is the "theoretical arrival time" (TAT): when the next permit is due if
// permits were spaced exactly. try_acquire(n) at `now` computes
// tat' = max(tat, now) + n·T and admits iff tat' − now ≤ L, publishing tat' by CAS,
// where L = tolerance + T (smooth) or capacity·T (bursty). A refusal's retry_after is
// the exact wait until the same request would be admitted if nothing else is:
// tat' − L − now. T is period/permits rounded up to a nanosecond, so the limiter never
// admits more than the configured rate (it may admit slightly fewer: under 1 ns per
// permit). try_acquire(0) is always admitted.
//
// In a pipeline: bulwark::rate_limit(limiter) (pipeline.h; never waits unless given a
// sleeper), bulwark::asio::rate_limit (waits on a timer). By key:
// rate_limiter_registry.h. Metrics: snapshot(), prometheus_limits.h.
//
// Cost: one clock read, one load and one CAS (retried under contention) per admission;
// a refusal adds one relaxed increment. No lock, no allocation, no thread, no timer:
// time is read lazily from the injected clock (clock.h). Lock-free: a static_assert
// checks it.
// Thread-safety: every member function may be called concurrently. A clock that steps
// back only delays admissions (time that went backwards is not credited).

#ifndef BULWARK_RATE_LIMITER_H_
#define BULWARK_RATE_LIMITER_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/expected.h"

namespace bulwark {

enum class RateLimitMode : std::uint8_t {
  smooth,  // GCRA: even spacing, `tolerance` of earliness
  bursty,  // token bucket: `capacity` permits at once, refilled continuously
};

struct RateLimiterConfig {
  // Identifies the limiter in errors and metrics.
  std::string name = "default";
  RateLimitMode mode = RateLimitMode::smooth;
  // The rate: `permits` per `period`. permits >= 1; period > 0 and >= permits
  // nanoseconds (at most one permit per nanosecond).
  std::uint64_t permits = 100;
  Nanos period = std::chrono::seconds(1);
  // smooth only: how early a request may come before its evenly spaced slot. >= 0.
  Nanos tolerance = Nanos::zero();
  // bursty only: the bucket's size in permits, >= 1. 0 means `permits` (one period's
  // worth). Must be 0 in smooth mode.
  std::uint64_t capacity = 0;
};

// Checks every field; the error names the first one that is wrong.
inline Expected<void, ConfigError> validate(const RateLimiterConfig& c) {
  const std::string who = "rate limiter '" + c.name + "'";
  auto bad = [&](const char* field, std::string msg) -> Expected<void, ConfigError> {
    return Unexpected(ConfigError{who, field, std::move(msg)});
  };
  if (c.name.empty()) return bad("name", "must not be empty");
  if (c.permits == 0) return bad("permits", "must be >= 1 (got 0)");
  if (c.period <= Nanos::zero()) {
    return bad("period", "must be positive (got " + detail::format_duration(c.period) + ")");
  }
  if (static_cast<std::uint64_t>(c.period.count()) < c.permits) {
    return bad("permits", "must be at most one per nanosecond of period (got " +
                              std::to_string(c.permits) + " per " +
                              detail::format_duration(c.period) + ")");
  }
  const Ticks t =
      (c.period.count() + static_cast<Ticks>(c.permits) - 1) / static_cast<Ticks>(c.permits);
  if (c.mode == RateLimitMode::smooth) {
    if (c.capacity != 0) return bad("capacity", "is for bursty mode; use tolerance in smooth mode");
    if (c.tolerance < Nanos::zero()) {
      return bad("tolerance", "must be >= 0 (got " + detail::format_duration(c.tolerance) + ")");
    }
    if (c.tolerance.count() > kTicksMax / 4) return bad("tolerance", "is too large");
  } else {
    if (c.tolerance != Nanos::zero()) {
      return bad("tolerance", "is for smooth mode; use capacity in bursty mode");
    }
    const std::uint64_t cap = c.capacity == 0 ? c.permits : c.capacity;
    if (cap > static_cast<std::uint64_t>(kTicksMax / 4 / t)) {
      return bad("capacity", "is too large for the rate (got " + std::to_string(cap) + ")");
    }
  }
  return {};
}

// Why try_acquire() said no, and when to ask again.
struct RateLimited {
  // The wait after which the same request would be admitted if no other took the
  // permits first (exact, in the limiter's clock). Nanos::max() when the request asks
  // for more permits than the burst can ever hold (`exceeds_burst`).
  Nanos retry_after = Nanos::zero();
  bool exceeds_burst = false;
};

// Totals since the limiter was built.
struct RateLimiterSnapshot {
  std::string name;
  std::string key;  // set by RateLimiterRegistry::snapshots(); empty for a standalone limiter
  std::uint64_t refused = 0;  // try_acquire() refusals (and reservations refused)
  std::uint64_t delayed = 0;  // reservations admitted with a wait (reserve())
  std::uint64_t burst = 0;    // permits admitted back to back at most
  double permits_per_second = 0;
};

template <Clock C = SteadyClock>
class BasicRateLimiter {
 public:
  using clock_type = C;

  // Validates (throws InvalidConfig naming the field; aborts without exceptions).
  explicit BasicRateLimiter(RateLimiterConfig config, const C& clock = C{})
      : config_(checked(std::move(config))), clock_(clock) {
    interval_ = (config_.period.count() + static_cast<Ticks>(config_.permits) - 1) /
                static_cast<Ticks>(config_.permits);
    burst_ = config_.mode == RateLimitMode::smooth
                 ? static_cast<std::uint64_t>(config_.tolerance.count() / interval_) + 1
                 : (config_.capacity == 0 ? config_.permits : config_.capacity);
    limit_ = config_.mode == RateLimitMode::smooth ? config_.tolerance.count() + interval_
                                                   : static_cast<Ticks>(burst_) * interval_;
  }
  BasicRateLimiter(const BasicRateLimiter&) = delete;
  BasicRateLimiter& operator=(const BasicRateLimiter&) = delete;

  // Takes `n` permits now, or none. Never waits.
  Expected<void, RateLimited> try_acquire(std::uint64_t n = 1) noexcept {
    auto r = take(n, now_ticks(clock_.get()), 0);
    if (!r) return Unexpected(r.error());
    return {};
  }

  // Takes `n` permits due at most `max_wait` from now: returns the wait (zero if due
  // now) the caller must let pass before using them, or a refusal when they are due
  // later than that. The permits are taken at once: a caller that then gives up
  // (cancelled while waiting) still spends them. max_wait <= 0 is try_acquire().
  Expected<Nanos, RateLimited> reserve(std::uint64_t n, Nanos max_wait) noexcept {
    const Ticks slack = std::max<Ticks>(0, to_ticks(max_wait));
    auto r = take(n, now_ticks(clock_.get()), slack);
    if (r && *r > Nanos::zero()) delayed_.fetch_add(1, std::memory_order_relaxed);
    return r;
  }

  // The wait until `n` permits would be admitted, without taking them (zero: now).
  Nanos time_until_available(std::uint64_t n = 1) const noexcept {
    if (n == 0) return Nanos::zero();
    if (n > burst_) return Nanos::max();
    const Ticks now = now_ticks(clock_.get());
    const Ticks tat = std::max(tat_.load(std::memory_order_relaxed), now);
    const Ticks next = saturating_add(tat, static_cast<Ticks>(n) * interval_);
    return Nanos(std::max<Ticks>(0, saturating_sub(saturating_sub(next, limit_), now)));
  }

  RateLimiterSnapshot snapshot() const {
    RateLimiterSnapshot s;
    s.name = config_.name;
    s.refused = refused_.load(std::memory_order_relaxed);
    s.delayed = delayed_.load(std::memory_order_relaxed);
    s.burst = burst_;
    s.permits_per_second =
        static_cast<double>(config_.permits) * 1e9 / static_cast<double>(config_.period.count());
    return s;
  }

  const RateLimiterConfig& config() const noexcept { return config_; }
  // The emission interval T: period / permits, rounded up to a nanosecond.
  Nanos interval() const noexcept { return Nanos(interval_); }
  // Permits admitted back to back at most (the bucket's capacity).
  std::uint64_t burst() const noexcept { return burst_; }

 private:
  static RateLimiterConfig checked(RateLimiterConfig c) {
    if (auto ok = validate(c); !ok) detail::raise_config_error(std::move(ok).error());
    return c;
  }

  // Admits n permits due within `slack` of now; returns the wait until they are due.
  Expected<Nanos, RateLimited> take(std::uint64_t n, Ticks now, Ticks slack) noexcept {
    if (n == 0) return Nanos::zero();
    if (n > burst_) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return Unexpected(RateLimited{Nanos::max(), true});
    }
    const Ticks cost = static_cast<Ticks>(n) * interval_;  // <= limit_: no overflow
    Ticks tat = tat_.load(std::memory_order_relaxed);
    for (;;) {
      const Ticks next = saturating_add(std::max(tat, now), cost);
      const Ticks wait = saturating_sub(saturating_sub(next, limit_), now);
      if (wait > slack) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        return Unexpected(RateLimited{Nanos(wait), false});
      }
      // Relaxed: the word publishes nothing but itself.
      if (tat_.compare_exchange_weak(tat, next, std::memory_order_relaxed,
                                     std::memory_order_relaxed)) {
        return Nanos(std::max<Ticks>(0, wait));
      }
    }
  }

  RateLimiterConfig config_;
  [[no_unique_address]] detail::ClockRef<C> clock_;
  Ticks interval_ = 1;
  Ticks limit_ = 1;  // burst · T (bursty), tolerance + T (smooth)
  std::uint64_t burst_ = 1;
  alignas(64) std::atomic<Ticks> tat_{kTicksMin};
  static_assert(std::atomic<Ticks>::is_always_lock_free);
  alignas(64) std::atomic<std::uint64_t> refused_{0};
  std::atomic<std::uint64_t> delayed_{0};
};

using RateLimiter = BasicRateLimiter<SteadyClock>;

}  // namespace bulwark

#endif  // BULWARK_RATE_LIMITER_H_
