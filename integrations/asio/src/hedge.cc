#include "bulwark/asio/hedge.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace bulwark::asio {

void LatencyTracker::record(Nanos latency) noexcept {
  const std::uint64_t n = count_.fetch_add(1, std::memory_order_relaxed);
  samples_[n % kSamples].store(std::max<std::int64_t>(0, latency.count()),
                               std::memory_order_relaxed);
  if ((n + 1) % kRefreshEvery == 0) refresh();
}

void LatencyTracker::refresh() noexcept {
  const std::uint64_t n = std::min<std::uint64_t>(count_.load(std::memory_order_relaxed), kSamples);
  std::array<std::int64_t, kSamples> v;
  for (std::size_t i = 0; i < n; ++i) v[i] = samples_[i].load(std::memory_order_relaxed);
  const auto begin = v.begin();
  const auto end = v.begin() + static_cast<std::ptrdiff_t>(n);
  for (std::size_t k = 0; k < kQuantiles.size(); ++k) {
    // The nearest-rank quantile: the smallest sample with at least q of them at or below.
    const auto rank =
        static_cast<std::ptrdiff_t>(std::ceil(kQuantiles[k] * static_cast<double>(n)) - 1);
    const auto at = begin + std::clamp<std::ptrdiff_t>(rank, 0, static_cast<std::ptrdiff_t>(n) - 1);
    std::nth_element(begin, at, end);
    cached_[k].store(*at, std::memory_order_relaxed);
  }
}

Nanos LatencyTracker::percentile(double q) const noexcept {
  if (count() < min_samples()) return Nanos::zero();
  std::size_t k = 0;
  while (k + 1 < kQuantiles.size() && kQuantiles[k] < q) ++k;
  return Nanos(cached_[k].load(std::memory_order_relaxed));
}

Expected<void, ConfigError> validate(const HedgeConfig& c) {
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(ConfigError{"hedge", std::move(field), std::move(message)});
  };
  if (c.max_hedges < 1 || c.max_hedges > kMaxHedges) {
    return fail("max_hedges", "must be between 1 and " + std::to_string(kMaxHedges) + " (got " +
                                  std::to_string(c.max_hedges) + ")");
  }
  if (c.delay.tracker() != nullptr && !(c.delay.quantile() > 0 && c.delay.quantile() <= 1)) {
    return fail("delay", "the percentile must be in (0, 1] (got " +
                             std::to_string(c.delay.quantile()) + ")");
  }
  if (c.delay.fallback() < Nanos::zero()) {
    return fail("delay", "must not be negative (got " +
                             bulwark::detail::format_duration(c.delay.fallback()) + ")");
  }
  return {};
}

HedgeStage<void> hedge(HedgeConfig config) {
  if (auto ok = validate(config); !ok) bulwark::detail::raise_config_error(std::move(ok).error());
  return {std::move(config)};
}

}  // namespace bulwark::asio
