#include "bulwark/circuit_breaker.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace bulwark {
namespace {

ConfigError breaker_error(const BreakerConfig& c, std::string field, std::string message) {
  return ConfigError{"circuit breaker '" + c.name + "'", std::move(field), std::move(message)};
}

}  // namespace

namespace {

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

bool in_unit_interval(double v) { return std::isfinite(v) && v > 0.0 && v <= 1.0; }

}  // namespace

namespace detail {

// The checks that do not depend on the breaker's window.
Expected<void, ConfigError> validate_common(const BreakerConfig& c) {
  constexpr std::uint32_t kMaxCount = Word::kCountMax;
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(breaker_error(c, std::move(field), std::move(message)));
  };
  if (c.name.empty()) return fail("name", "must not be empty");
  if (c.consecutive_failures > kMaxCount) {
    return fail("consecutive_failures",
                "must be at most 65535 (got " + std::to_string(c.consecutive_failures) + ")");
  }
  for (const auto& [field, rate] :
       {std::pair{"failure_rate", c.failure_rate}, std::pair{"slow_call_rate", c.slow_call_rate}}) {
    if (rate && !in_unit_interval(*rate)) {
      return fail(field, "must be in (0, 1] (got " + number(*rate) +
                             "); leave it unset to turn the rule off");
    }
  }
  if (c.slow_call_duration < Nanos::zero()) {
    return fail("slow_call_duration",
                "must not be negative (got " + format_duration(c.slow_call_duration) + ")");
  }
  if (c.slow_call_rate && c.slow_call_duration == Nanos::zero()) {
    return fail("slow_call_duration",
                "must be set when slow_call_rate is set (it says what is slow)");
  }
  if (c.minimum_calls < 1) return fail("minimum_calls", "must be at least 1 (got 0)");
  if (c.open_duration <= Nanos::zero()) {
    return fail("open_duration", "must be positive (got " + format_duration(c.open_duration) + ")");
  }
  if (!std::isfinite(c.open_duration_multiplier) || c.open_duration_multiplier < 1.0) {
    return fail("open_duration_multiplier",
                "must be a finite number >= 1 (got " + number(c.open_duration_multiplier) + ")");
  }
  if (c.max_open_duration != Nanos::zero() && c.max_open_duration < c.open_duration) {
    return fail("max_open_duration", "must be at least open_duration (got " +
                                         format_duration(c.max_open_duration) + " < " +
                                         format_duration(c.open_duration) + ")");
  }
  if (c.max_open_duration == Nanos::zero() && c.open_duration_multiplier > 1.0) {
    return fail("max_open_duration",
                "must be set when open_duration_multiplier is above 1 (it caps the growth)");
  }
  if (c.half_open_max_calls && (*c.half_open_max_calls < 1 || *c.half_open_max_calls > kMaxCount)) {
    return fail("half_open_max_calls",
                "must be between 1 and 65535 (got " + std::to_string(*c.half_open_max_calls) + ")");
  }
  if (c.half_open_successes < 1 || c.half_open_successes > Word::kSuccessMax) {
    return fail("half_open_successes", "must be between 1 and " +
                                           std::to_string(Word::kSuccessMax) + " (got " +
                                           std::to_string(c.half_open_successes) + ")");
  }
  if (c.half_open_fraction && !in_unit_interval(*c.half_open_fraction)) {
    return fail("half_open_fraction",
                "must be in (0, 1] (got " + number(*c.half_open_fraction) + ")");
  }
  if (!c.half_open_ramp.empty()) {
    if (!c.half_open_fraction)
      return fail("half_open_ramp", "needs half_open_fraction (the first stage)");
    if (c.half_open_ramp.size() > Word::kStageMax) {
      return fail("half_open_ramp", "has at most " + std::to_string(Word::kStageMax) +
                                        " stages (got " + std::to_string(c.half_open_ramp.size()) +
                                        ")");
    }
    double previous = *c.half_open_fraction;
    for (std::size_t i = 0; i < c.half_open_ramp.size(); ++i) {
      const double f = c.half_open_ramp[i];
      if (!in_unit_interval(f) || f < previous) {
        return fail("half_open_ramp", "stage " + std::to_string(i + 1) +
                                          " must be in (0, 1] and at least " + number(previous) +
                                          " (got " + number(f) + ")");
      }
      previous = f;
    }
  }
  if (c.half_open_max_wait < Nanos::zero()) {
    return fail("half_open_max_wait",
                "must not be negative (got " + format_duration(c.half_open_max_wait) + ")");
  }
  if (c.flapping_period < Nanos::zero()) {
    return fail("flapping_period",
                "must not be negative (got " + format_duration(c.flapping_period) + ")");
  }
  return {};
}

// The checks that depend on the window the breaker has.
Expected<void, ConfigError> validate_window(const BreakerConfig& c, WindowKind kind,
                                            std::uint32_t capacity) {
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(breaker_error(c, std::move(field), std::move(message)));
  };
  if (kind == WindowKind::none) {
    const char* needs = "needs a sliding window: build a CountWindowBreaker or a TimeWindowBreaker";
    if (c.failure_rate) return fail("failure_rate", needs);
    if (c.slow_call_rate) return fail("slow_call_rate", needs);
    if (c.slow_call_duration != Nanos::zero()) return fail("slow_call_duration", needs);
    if (c.count_in_flight_slow_calls) return fail("count_in_flight_slow_calls", needs);
    return {};
  }
  if (kind == WindowKind::count && (c.window_size < 1 || c.window_size > Word::kCountMax)) {
    return fail("window_size",
                "must be between 1 and 65535 calls (got " + std::to_string(c.window_size) + ")");
  }
  if (kind == WindowKind::time) {
    if (c.window_length <= Nanos::zero()) {
      return fail("window_length",
                  "must be positive (got " + format_duration(c.window_length) + ")");
    }
    if (c.window_buckets < 1 || c.window_buckets > capacity) {
      return fail("window_buckets", "must be between 1 and " + std::to_string(capacity) +
                                        " (this breaker type's capacity; got " +
                                        std::to_string(c.window_buckets) + ")");
    }
    if (c.window_length / c.window_buckets < std::chrono::milliseconds(1)) {
      return fail("window_buckets", "make buckets of at least 1ms (window_length " +
                                        format_duration(c.window_length) + " / " +
                                        std::to_string(c.window_buckets) + " buckets is less)");
    }
  }
  if (c.count_in_flight_slow_calls && c.slow_call_duration == Nanos::zero()) {
    return fail("count_in_flight_slow_calls",
                "needs slow_call_duration (it says when a call in flight is slow)");
  }
  if (c.count_in_flight_slow_calls && c.slow_call_duration < std::chrono::milliseconds(1)) {
    return fail("slow_call_duration", "must be at least 1ms to count calls in flight (got " +
                                          format_duration(c.slow_call_duration) + ")");
  }
  return {};
}

}  // namespace detail

Expected<void, ConfigError> validate(const BreakerConfig& c, WindowKind window,
                                     std::uint32_t bucket_capacity) {
  if (auto ok = detail::validate_common(c); !ok) return ok;
  return detail::validate_window(c, window, bucket_capacity);
}

namespace detail {

std::string format_duration(Nanos d) {
  if (d == Nanos::max()) return "forever";
  struct Unit {
    Ticks ns;
    const char* name;
  };
  static constexpr Unit kUnits[] = {
      {3'600'000'000'000, "h"}, {60'000'000'000, "min"}, {1'000'000'000, "s"},
      {1'000'000, "ms"},        {1'000, "us"},           {1, "ns"}};
  const Ticks n = d.count();
  const Ticks magnitude = n < 0 ? (n == kTicksMin ? kTicksMax : -n) : n;
  for (const Unit& u : kUnits) {
    if (magnitude >= u.ns || u.ns == 1) {
      std::ostringstream out;
      if (n % u.ns == 0) {
        out << n / u.ns << u.name;
      } else {
        out << static_cast<double>(n) / static_cast<double>(u.ns) << u.name;
      }
      return out.str();
    }
  }
  return std::to_string(n) + "ns";
}

[[noreturn]] void raise_config_error(ConfigError error) {
#if defined(__cpp_exceptions)
  throw InvalidConfig(std::move(error));
#else
  std::fprintf(stderr, "bulwark: invalid configuration: %s\n", error.to_string().c_str());
  std::abort();
#endif
}

namespace {
BreakerConfig&& checked(BreakerConfig& config) {
  if (auto ok = validate_common(config); !ok) raise_config_error(std::move(ok).error());
  return std::move(config);
}
}  // namespace

PolicyCore::PolicyCore(BreakerConfig config_in)
    : config(checked(config_in)),
      consecutive_failures(config.consecutive_failures),
      half_open_max_calls(
          config.half_open_max_calls.value_or(config.half_open_fraction ? Word::kInFlightMax : 1)),
      half_open_successes(config.half_open_successes),
      half_open_max_wait(config.half_open_max_wait.count()),
      failure_rate(config.failure_rate.value_or(-1.0)),
      slow_call_rate(config.slow_call_rate.value_or(-1.0)),
      minimum_calls(config.minimum_calls),
      slow_call_duration(config.slow_call_duration.count()),
      flapping_period(config.flapping_period.count()),
      window{.size = config.window_size,
             .buckets = config.window_buckets,
             .bucket_width =
                 (config.window_length / std::max<std::uint32_t>(1, config.window_buckets)).count(),
             .slow_call_duration = config.slow_call_duration.count(),
             .track_in_flight =
                 config.count_in_flight_slow_calls && config.slow_call_duration > Nanos::zero(),
             .epoch_shift = static_cast<unsigned>(std::bit_width(
                 static_cast<std::uint64_t>(std::max<Ticks>(2, config.slow_call_duration.count())) -
                 1))},
      rng_(config.random_seed) {
  // The r-th consecutive opening lasts base * multiplier^(r-1), capped. Computed once
  // in long double and clamped, so no later arithmetic can overflow or go negative.
  const Nanos max =
      config.max_open_duration == Nanos::zero() ? config.open_duration : config.max_open_duration;
  const long double base = static_cast<long double>(config.open_duration.count());
  const long double cap = static_cast<long double>(max.count());
  long double period = base;
  for (std::uint32_t r = 1; r <= Word::kReopenMax; ++r) {
    open_periods_[r] = static_cast<Ticks>(std::min(period, cap));
    period = std::min(period * static_cast<long double>(config.open_duration_multiplier), cap);
  }
  open_periods_[0] = open_periods_[1];
  if (config.half_open_fraction) {
    stage_fraction_[0] = *config.half_open_fraction;
    for (std::size_t i = 0; i < config.half_open_ramp.size(); ++i)
      stage_fraction_[i + 1] = config.half_open_ramp[i];
    last_stage = static_cast<std::uint32_t>(config.half_open_ramp.size());
  }
}

double PolicyCore::draw() const noexcept {
  if (config.random) return config.random();
  // splitmix64 over a shared counter: lock-free, and deterministic for a given seed.
  std::uint64_t z =
      rng_.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

void check_window(const PolicyCore& policy, WindowKind kind, std::uint32_t capacity) {
  if (auto ok = validate_window(policy.config, kind, capacity); !ok)
    raise_config_error(std::move(ok).error());
}

}  // namespace detail
}  // namespace bulwark
