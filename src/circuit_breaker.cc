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

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

bool in_unit_interval(double v) { return std::isfinite(v) && v > 0.0 && v <= 1.0; }

}  // namespace

namespace detail {

namespace {
// The fields every breaker kind has.
template <class C>
BreakerSpec common_spec(C&& c) {
  BreakerSpec s;
  s.name = std::move(c.name);
  s.consecutive_failures = c.consecutive_failures;
  s.open_duration = c.open_duration;
  s.open_growth = c.open_growth;
  s.half_open = std::move(c.half_open);
  s.flapping_period = c.flapping_period;
  return s;
}

template <class Shape>
BreakerSpec rate_spec(RateBreakerConfig<Shape>&& c, WindowKind kind) {
  BreakerSpec s = common_spec(std::move(c));
  s.window = kind;
  s.minimum_calls = c.minimum_calls;
  s.failure_rate = c.failure_rate;
  s.slow_call_rate = c.slow_call_rate;
  s.slow_call_duration = c.slow_call_duration;
  s.count_in_flight_slow_calls = c.count_in_flight_slow_calls;
  return s;
}
}  // namespace

BreakerSpec spec_of(BreakerConfig c) { return common_spec(std::move(c)); }

BreakerSpec spec_of(CountWindowConfig c) {
  const CountWindowShape window = c.window;
  BreakerSpec s = rate_spec(std::move(c), WindowKind::count);
  s.window_size = window.size;
  return s;
}

BreakerSpec spec_of(TimeWindowConfig c) {
  const TimeWindowShape window = c.window;
  BreakerSpec s = rate_spec(std::move(c), WindowKind::time);
  s.window_length = window.length;
  s.window_buckets = window.buckets;
  return s;
}

Expected<void, ConfigError> validate_spec(const BreakerSpec& c, std::uint32_t capacity) {
  constexpr std::uint32_t kMaxCount = Word::kCountMax;
  const bool windowed = c.window != WindowKind::none;
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(
        ConfigError{"circuit breaker '" + c.name + "'", std::move(field), std::move(message)});
  };
  if (c.name.empty()) return fail("name", "must not be empty");
  if (windowed ? c.consecutive_failures > kMaxCount
               : (c.consecutive_failures < 1 || c.consecutive_failures > kMaxCount)) {
    return fail("consecutive_failures",
                std::string(windowed ? "must be at most 65535" : "must be between 1 and 65535") +
                    " (got " + std::to_string(c.consecutive_failures) + ")");
  }
  if (c.window == WindowKind::count && (c.window_size < 1 || c.window_size > kMaxCount)) {
    return fail("window.size",
                "must be between 1 and 65535 calls (got " + std::to_string(c.window_size) + ")");
  }
  if (c.window == WindowKind::time) {
    if (c.window_length <= Nanos::zero()) {
      return fail("window.length",
                  "must be positive (got " + format_duration(c.window_length) + ")");
    }
    if (c.window_buckets < 1 || c.window_buckets > capacity) {
      return fail("window.buckets", "must be between 1 and " + std::to_string(capacity) +
                                        " (this breaker type's capacity; got " +
                                        std::to_string(c.window_buckets) + ")");
    }
    if (c.window_length / c.window_buckets < std::chrono::milliseconds(1)) {
      return fail("window.buckets", "must make buckets of at least 1ms (window.length " +
                                        format_duration(c.window_length) + " / " +
                                        std::to_string(c.window_buckets) + " buckets is less)");
    }
  }
  if (windowed) {
    if (c.minimum_calls < 1) return fail("minimum_calls", "must be at least 1 (got 0)");
    for (const auto& [field, rate] : {std::pair{"failure_rate", c.failure_rate},
                                      std::pair{"slow_call_rate", c.slow_call_rate}}) {
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
    if (c.count_in_flight_slow_calls && c.slow_call_duration == Nanos::zero()) {
      return fail("count_in_flight_slow_calls",
                  "needs slow_call_duration (it says when a call in flight is slow)");
    }
    if (c.count_in_flight_slow_calls && c.slow_call_duration < std::chrono::milliseconds(1)) {
      return fail("slow_call_duration", "must be at least 1ms to count calls in flight (got " +
                                            format_duration(c.slow_call_duration) + ")");
    }
    if (!c.failure_rate && !c.slow_call_rate && c.consecutive_failures == 0) {
      return fail("failure_rate",
                  "must be set: this breaker has no trip rule (set failure_rate, "
                  "slow_call_rate or consecutive_failures; `bulwark calibrate` suggests "
                  "values from a recorded trace)");
    }
  }
  if (c.open_duration <= Nanos::zero()) {
    return fail("open_duration", "must be positive (got " + format_duration(c.open_duration) + ")");
  }
  const OpenGrowth& g = c.open_growth;
  if (!std::isfinite(g.multiplier) || g.multiplier < 1.0) {
    return fail("open_growth.multiplier",
                "must be a finite number >= 1 (got " + number(g.multiplier) + ")");
  }
  if (g.max != Nanos::zero() && g.max < c.open_duration) {
    return fail("open_growth.max", "must be at least open_duration (got " + format_duration(g.max) +
                                       " < " + format_duration(c.open_duration) + ")");
  }
  if (g.max == Nanos::zero() && g.multiplier > 1.0) {
    return fail("open_growth.max",
                "must be set when open_growth.multiplier is above 1 (it caps the growth)");
  }
  const HalfOpen& h = c.half_open;
  if (h.probes < 1 || h.probes > Word::kSuccessMax) {
    return fail("half_open.probes", "must be between 1 and " + std::to_string(Word::kSuccessMax) +
                                        " (got " + std::to_string(h.probes) + ")");
  }
  if (h.max_in_flight && (*h.max_in_flight < 1 || *h.max_in_flight > kMaxCount)) {
    return fail("half_open.max_in_flight",
                "must be between 1 and 65535 (got " + std::to_string(*h.max_in_flight) + ")");
  }
  if (h.fraction && !in_unit_interval(*h.fraction)) {
    return fail("half_open.fraction", "must be in (0, 1] (got " + number(*h.fraction) + ")");
  }
  if (h.fraction && h.max_in_flight) {
    return fail("half_open.max_in_flight",
                "must not be set together with half_open.fraction (the fraction limits the "
                "probes)");
  }
  if (!h.ramp.empty()) {
    if (!h.fraction) return fail("half_open.ramp", "needs half_open.fraction (the first stage)");
    if (h.ramp.size() > Word::kStageMax) {
      return fail("half_open.ramp", "has at most " + std::to_string(Word::kStageMax) +
                                        " stages (got " + std::to_string(h.ramp.size()) + ")");
    }
    double previous = *h.fraction;
    for (std::size_t i = 0; i < h.ramp.size(); ++i) {
      const double f = h.ramp[i];
      if (!in_unit_interval(f) || f < previous) {
        return fail("half_open.ramp", "stage " + std::to_string(i + 1) +
                                          " must be in (0, 1] and at least " + number(previous) +
                                          " (got " + number(f) + ")");
      }
      previous = f;
    }
  }
  if (h.max_wait < Nanos::zero()) {
    return fail("half_open.max_wait",
                "must not be negative (got " + format_duration(h.max_wait) + ")");
  }
  if (c.flapping_period < Nanos::zero()) {
    return fail("flapping_period",
                "must not be negative (got " + format_duration(c.flapping_period) + ")");
  }
  return {};
}

}  // namespace detail

Expected<void, ConfigError> validate(const BreakerConfig& c) {
  return detail::validate_spec(detail::spec_of(c), 0);
}

Expected<void, ConfigError> validate(const CountWindowConfig& c) {
  return detail::validate_spec(detail::spec_of(c), 0);
}

Expected<void, ConfigError> validate(const TimeWindowConfig& c, std::uint32_t bucket_capacity) {
  return detail::validate_spec(detail::spec_of(c), bucket_capacity);
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
BreakerSpec&& checked(BreakerSpec& spec, std::uint32_t capacity) {
  if (auto ok = validate_spec(spec, capacity); !ok) raise_config_error(std::move(ok).error());
  return std::move(spec);
}
}  // namespace

PolicyCore::PolicyCore(BreakerSpec spec_in, std::uint32_t bucket_capacity)
    : spec(checked(spec_in, bucket_capacity)),
      consecutive_failures(spec.consecutive_failures),
      half_open_max_calls(spec.half_open.max_in_flight.value_or(
          spec.half_open.fraction ? Word::kInFlightMax : spec.half_open.probes)),
      half_open_successes(spec.half_open.probes),
      half_open_max_wait(spec.half_open.max_wait.count()),
      failure_rate(spec.failure_rate.value_or(-1.0)),
      slow_call_rate(spec.slow_call_rate.value_or(-1.0)),
      minimum_calls(spec.minimum_calls),
      slow_call_duration(spec.slow_call_duration.count()),
      flapping_period(spec.flapping_period.count()),
      window{.size = spec.window_size,
             .buckets = spec.window_buckets,
             .bucket_width =
                 (spec.window_length / std::max<std::uint32_t>(1, spec.window_buckets)).count(),
             .slow_call_duration = spec.slow_call_duration.count(),
             .track_in_flight =
                 spec.count_in_flight_slow_calls && spec.slow_call_duration > Nanos::zero(),
             .epoch_shift = static_cast<unsigned>(std::bit_width(
                 static_cast<std::uint64_t>(std::max<Ticks>(2, spec.slow_call_duration.count())) -
                 1))},
      rng_(spec.half_open.random_seed) {
  set_open_periods(spec);
  if (spec.half_open.fraction) {
    stage_fraction_[0] = *spec.half_open.fraction;
    for (std::size_t i = 0; i < spec.half_open.ramp.size(); ++i)
      stage_fraction_[i + 1] = spec.half_open.ramp[i];
    last_stage = static_cast<std::uint32_t>(spec.half_open.ramp.size());
  }
}

void PolicyCore::set_open_periods(const BreakerSpec& s) noexcept {
  // The r-th consecutive opening lasts base * multiplier^(r-1), capped. Computed once
  // in long double and clamped, so no later arithmetic can overflow or go negative.
  const Nanos max = s.open_growth.max == Nanos::zero() ? s.open_duration : s.open_growth.max;
  const long double base = static_cast<long double>(s.open_duration.count());
  const long double cap = static_cast<long double>(max.count());
  long double period = base;
  for (std::uint32_t r = 1; r <= Word::kReopenMax; ++r) {
    open_periods_[r].store(static_cast<Ticks>(std::min(period, cap)), std::memory_order_relaxed);
    period = std::min(period * static_cast<long double>(s.open_growth.multiplier), cap);
  }
  open_periods_[0].store(open_periods_[1].load(std::memory_order_relaxed),
                         std::memory_order_relaxed);
}

void PolicyCore::retune(const BreakerSpec& next) noexcept {
  constexpr auto relaxed = std::memory_order_relaxed;
  consecutive_failures.store(next.consecutive_failures, relaxed);
  failure_rate.store(next.failure_rate.value_or(-1.0), relaxed);
  slow_call_rate.store(next.slow_call_rate.value_or(-1.0), relaxed);
  minimum_calls.store(next.minimum_calls, relaxed);
  flapping_period.store(next.flapping_period.count(), relaxed);
  half_open_max_wait.store(next.half_open.max_wait.count(), relaxed);
  set_open_periods(next);
}

void check_retunable(const BreakerSpec& now, const BreakerSpec& next) {
  const auto refuse = [&](const char* field) {
    raise_config_error(
        ConfigError{"circuit breaker '" + now.name + "'", field,
                    "cannot change on a live breaker (reconfigure takes consecutive_failures, "
                    "failure_rate, slow_call_rate, minimum_calls, open_duration, open_growth, "
                    "flapping_period and half_open.max_wait): build a new one"});
  };
  if (now.name != next.name) refuse("name");
  if (now.window_size != next.window_size) refuse("window.size");
  if (now.window_length != next.window_length) refuse("window.length");
  if (now.window_buckets != next.window_buckets) refuse("window.buckets");
  if (now.slow_call_duration != next.slow_call_duration) refuse("slow_call_duration");
  if (now.count_in_flight_slow_calls != next.count_in_flight_slow_calls) {
    refuse("count_in_flight_slow_calls");
  }
  if (now.half_open.probes != next.half_open.probes) refuse("half_open.probes");
  if (now.half_open.max_in_flight != next.half_open.max_in_flight) {
    refuse("half_open.max_in_flight");
  }
  if (now.half_open.fraction != next.half_open.fraction) refuse("half_open.fraction");
  if (now.half_open.ramp != next.half_open.ramp) refuse("half_open.ramp");
  if (now.half_open.random_seed != next.half_open.random_seed) refuse("half_open.random_seed");
  // Switching a rule on or off is a threshold change; the window always counts both.
}

double PolicyCore::draw() const noexcept {
  if (spec.half_open.random) return spec.half_open.random();
  // splitmix64 over a shared counter: lock-free, and deterministic for a given seed.
  std::uint64_t z =
      rng_.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace detail
}  // namespace bulwark
