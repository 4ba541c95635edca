#include "bulwark/circuit_breaker.h"

#include <algorithm>
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

Expected<void, ConfigError> validate(const BreakerConfig& c) {
  constexpr std::uint32_t kMaxCount = detail::Word::kCountMax;
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(breaker_error(c, std::move(field), std::move(message)));
  };
  if (c.name.empty()) return fail("name", "must not be empty");
  if (c.consecutive_failures > kMaxCount) {
    return fail("consecutive_failures",
                "must be at most 65535 (got " + std::to_string(c.consecutive_failures) + ")");
  }
  if (c.open_duration <= Nanos::zero()) {
    return fail("open_duration",
                "must be positive (got " + detail::format_duration(c.open_duration) + ")");
  }
  if (!std::isfinite(c.open_duration_multiplier) || c.open_duration_multiplier < 1.0) {
    return fail("open_duration_multiplier", "must be a finite number >= 1 (got " +
                                                std::to_string(c.open_duration_multiplier) + ")");
  }
  if (c.max_open_duration != Nanos::zero() && c.max_open_duration < c.open_duration) {
    return fail("max_open_duration", "must be at least open_duration (got " +
                                         detail::format_duration(c.max_open_duration) + " < " +
                                         detail::format_duration(c.open_duration) + ")");
  }
  if (c.max_open_duration == Nanos::zero() && c.open_duration_multiplier > 1.0) {
    return fail("max_open_duration",
                "must be set when open_duration_multiplier is above 1 (it caps the growth)");
  }
  if (c.half_open_max_calls < 1 || c.half_open_max_calls > kMaxCount) {
    return fail("half_open_max_calls",
                "must be between 1 and 65535 (got " + std::to_string(c.half_open_max_calls) + ")");
  }
  if (c.half_open_successes < 1 || c.half_open_successes > kMaxCount) {
    return fail("half_open_successes",
                "must be between 1 and 65535 (got " + std::to_string(c.half_open_successes) + ")");
  }
  if (c.half_open_max_wait < Nanos::zero()) {
    return fail("half_open_max_wait",
                "must not be negative (got " + detail::format_duration(c.half_open_max_wait) + ")");
  }
  return {};
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
  if (auto ok = validate(config); !ok) raise_config_error(std::move(ok).error());
  return std::move(config);
}
}  // namespace

PolicyCore::PolicyCore(BreakerConfig config_in)
    : config(checked(config_in)),
      consecutive_failures(config.consecutive_failures),
      half_open_max_calls(config.half_open_max_calls),
      half_open_successes(config.half_open_successes),
      half_open_max_wait(config.half_open_max_wait.count()) {
  // The r-th consecutive opening lasts base * multiplier^(r-1), capped. Computed once
  // in long double and clamped, so no later arithmetic can overflow or go negative.
  const long double base = static_cast<long double>(config.open_duration.count());
  const Nanos max =
      config.max_open_duration == Nanos::zero() ? config.open_duration : config.max_open_duration;
  const long double cap = static_cast<long double>(max.count());
  long double period = base;
  for (std::uint32_t r = 1; r <= Word::kReopenMax; ++r) {
    open_periods_[r] = static_cast<Ticks>(std::min(period, cap));
    period = std::min(period * static_cast<long double>(config.open_duration_multiplier), cap);
  }
  open_periods_[0] = open_periods_[1];
}

ListenerId ListenerList::add(TransitionListener listener) {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<List>(*list_);
  const ListenerId id = next_id_++;
  next->push_back(Entry{id, std::move(listener)});
  list_ = std::move(next);
  count_.store(list_->size(), std::memory_order_relaxed);
  return id;
}

bool ListenerList::remove(ListenerId id) {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<List>(*list_);
  const auto it =
      std::find_if(next->begin(), next->end(), [id](const Entry& e) { return e.id == id; });
  if (it == next->end()) return false;
  next->erase(it);
  list_ = std::move(next);
  count_.store(list_->size(), std::memory_order_relaxed);
  return true;
}

void ListenerList::emit(const TransitionEvent& event) const noexcept {
  std::shared_ptr<const List> list;
  {
    std::lock_guard lock(mu_);
    list = list_;
  }
  for (const Entry& entry : *list) {
#if defined(__cpp_exceptions)
    try {
      entry.fn(event);
    } catch (...) {
      // A listener's failure is its own; the breaker has already transitioned.
    }
#else
    entry.fn(event);
#endif
  }
}

}  // namespace detail
}  // namespace bulwark
