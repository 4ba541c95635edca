#include "bulwark/backoff.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

namespace bulwark {
namespace {

// Clamps a non-negative floating-point number of nanoseconds to [0, cap].
Nanos clamp_ns(long double ns, Nanos cap) noexcept {
  if (!(ns > 0)) return Nanos::zero();  // also catches NaN
  const long double c = static_cast<long double>(cap.count());
  if (ns >= c) return cap;
  return Nanos(static_cast<Ticks>(ns));
}

}  // namespace

std::uint64_t thread_random() noexcept {
  // Seeded from the thread's identity, the time and a process-wide counter, so
  // threads started together still draw different sequences.
  static std::atomic<std::uint64_t> counter{0};
  thread_local SplitMix64 rng([] {
    const auto t =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const auto id =
        static_cast<std::uint64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    return t ^ (id * 0x9e3779b97f4a7c15ULL) ^
           counter.fetch_add(0x632be59bd9b4e019ULL, std::memory_order_relaxed);
  }());
  return rng();
}

Nanos uniform_between(Nanos lo, Nanos hi, std::uint64_t random) noexcept {
  if (hi <= lo) return lo;
  // Lemire's multiply-shift: maps 64 random bits onto [0, span] without a division.
  const auto span = static_cast<std::uint64_t>(hi.count() - lo.count()) + 1;  // <= 2^63
  __extension__ using u128 = unsigned __int128;
  const auto offset = static_cast<std::uint64_t>((static_cast<u128>(random) * span) >> 64);
  return lo + Nanos(static_cast<Ticks>(offset));
}

Backoff Backoff::constant(Nanos d) { return Backoff(Kind::constant, d, 1.0, d); }

Backoff Backoff::exponential(Nanos initial, double multiplier, Nanos max) {
  return Backoff(Kind::exponential, initial, multiplier, max);
}

Backoff Backoff::custom(std::function<Nanos(std::uint32_t)> fn, Nanos max) {
  Backoff b(Kind::custom, Nanos::zero(), 1.0, max);
  b.fn_ = std::move(fn);
  return b;
}

Nanos Backoff::base_delay(std::uint32_t n) const noexcept {
  n = std::max<std::uint32_t>(n, 1);
  const Nanos cap = std::max(max_, Nanos::zero());
  switch (kind_) {
    case Kind::constant:
      return std::max(initial_, Nanos::zero());
    case Kind::exponential: {
      // initial * multiplier^(n-1) in long double: for huge n it becomes +inf and is
      // clamped to the cap, never wrapping to zero or a negative number.
      const long double grown =
          static_cast<long double>(initial_.count()) *
          std::pow(static_cast<long double>(multiplier_), static_cast<long double>(n - 1));
      return clamp_ns(grown, cap);
    }
    case Kind::custom: {
      if (!fn_) return Nanos::zero();
      const Nanos d = fn_(n);
      return std::clamp(d, Nanos::zero(), cap);
    }
  }
  return Nanos::zero();
}

Nanos Backoff::delay(std::uint32_t n, Nanos previous, std::uint64_t random) const noexcept {
  switch (jitter_) {
    case Jitter::none:
      return base_delay(n);
    case Jitter::full:
      return uniform_between(Nanos::zero(), base_delay(n), random);
    case Jitter::equal: {
      const Nanos d = base_delay(n);
      const Nanos half = d / 2;
      return uniform_between(half, d, random);
    }
    case Jitter::decorrelated: {
      const Nanos cap = std::max(max_, Nanos::zero());
      const Nanos lo = std::min(base_delay(1), cap);
      const Nanos prev = std::max(previous, lo);
      // min(cap, 3 * prev) without overflow: prev > cap / 3 (integer division) is
      // exactly when 3 * prev > cap. (prev >= cap / 3 would return the cap for
      // prev == cap / 3 although 3 * prev can be up to 2 ns below it.)
      const Nanos hi = prev > cap / 3 ? cap : prev * 3;
      return uniform_between(lo, std::max(lo, hi), random);
    }
  }
  return base_delay(n);
}

Expected<void, ConfigError> Backoff::validate(const std::string& component,
                                              const std::string& prefix) const {
  auto fail = [&](const std::string& field, std::string message) {
    return Unexpected(ConfigError{component, prefix + "." + field, std::move(message)});
  };
  switch (kind_) {
    case Kind::constant:
      if (initial_ < Nanos::zero())
        return fail("delay",
                    "must not be negative (got " + detail::format_duration(initial_) + ")");
      break;
    case Kind::exponential:
      if (initial_ <= Nanos::zero())
        return fail("initial", "must be positive (got " + detail::format_duration(initial_) + ")");
      if (!std::isfinite(multiplier_) || multiplier_ < 1.0) {
        return fail("multiplier",
                    "must be a finite number >= 1 (got " + std::to_string(multiplier_) + ")");
      }
      if (max_ < initial_) {
        return fail("max", "must be at least initial (got " + detail::format_duration(max_) +
                               " < " + detail::format_duration(initial_) + ")");
      }
      break;
    case Kind::custom:
      if (!fn_) return fail("function", "must not be empty");
      if (max_ < Nanos::zero())
        return fail("max", "must not be negative (got " + detail::format_duration(max_) + ")");
      break;
  }
  switch (jitter_) {
    case Jitter::none:
    case Jitter::full:
    case Jitter::equal:
    case Jitter::decorrelated:
      break;
    default:
      return fail("jitter",
                  "is not a known jitter (got " + std::to_string(static_cast<int>(jitter_)) + ")");
  }
  return {};
}

}  // namespace bulwark
