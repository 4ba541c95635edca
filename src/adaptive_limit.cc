#include "bulwark/adaptive_limit.h"

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "bulwark/prometheus.h"

namespace bulwark {
namespace {

std::string num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

Expected<void, ConfigError> validate(const AdaptiveLimitConfig& c) {
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(
        ConfigError{"adaptive limit '" + c.name + "'", std::move(field), std::move(message)});
  };
  auto got = [](auto v) { return " (got " + num(static_cast<double>(v)) + ")"; };
  auto finite = [](double v) { return std::isfinite(v); };
  if (c.name.empty()) return fail("name", "must not be empty");
  if (c.min_limit < 1) return fail("min_limit", "must be at least 1" + got(c.min_limit));
  if (c.max_limit < c.min_limit)
    return fail("max_limit", "must be at least min_limit " + num(c.min_limit) + got(c.max_limit));
  if (c.initial_limit < c.min_limit || c.initial_limit > c.max_limit) {
    return fail("initial_limit", "must be within [min_limit, max_limit] = [" + num(c.min_limit) +
                                     ", " + num(c.max_limit) + "]" + got(c.initial_limit));
  }
  if (c.window_samples < 1) return fail("window_samples", "must be at least 1 (got 0)");
  if (c.min_window < Nanos::zero()) {
    return fail("min_window",
                "must not be negative (got " + detail::format_duration(c.min_window) + ")");
  }
  // A window counts its samples in 32 bits: 10 s of windows at 400 M calls/s.
  if (c.min_window > std::chrono::seconds(10)) {
    return fail("min_window",
                "must be at most 10s (got " + detail::format_duration(c.min_window) + ")");
  }
  const AimdConfig& a = c.aimd;
  if (!finite(a.backoff_ratio) || a.backoff_ratio <= 0 || a.backoff_ratio >= 1)
    return fail("aimd.backoff_ratio", "must be a number in (0, 1)" + got(a.backoff_ratio));
  if (!finite(a.increase) || a.increase <= 0)
    return fail("aimd.increase", "must be a finite number > 0" + got(a.increase));
  if (a.timeout <= Nanos::zero()) {
    return fail("aimd.timeout",
                "must be positive (got " + detail::format_duration(a.timeout) + ")");
  }
  const VegasConfig& v = c.vegas;
  if (!finite(v.alpha) || v.alpha <= 0)
    return fail("vegas.alpha", "must be a finite number > 0" + got(v.alpha));
  if (!finite(v.beta) || v.beta < v.alpha)
    return fail("vegas.beta", "must be a finite number >= alpha" + got(v.beta));
  if (v.probe_every < 1) return fail("vegas.probe_every", "must be at least 1 (got 0)");
  if (!finite(v.smoothing) || v.smoothing <= 0 || v.smoothing > 1)
    return fail("vegas.smoothing", "must be a number in (0, 1]" + got(v.smoothing));
  const Gradient2Config& g = c.gradient2;
  if (!finite(g.tolerance) || g.tolerance < 1)
    return fail("gradient2.tolerance", "must be a finite number >= 1" + got(g.tolerance));
  if (g.long_window < 1) return fail("gradient2.long_window", "must be at least 1 (got 0)");
  if (g.warmup < 1) return fail("gradient2.warmup", "must be at least 1 (got 0)");
  if (!finite(g.queue_size) || g.queue_size < 0)
    return fail("gradient2.queue_size", "must be a finite number >= 0" + got(g.queue_size));
  if (!finite(g.smoothing) || g.smoothing <= 0 || g.smoothing > 1)
    return fail("gradient2.smoothing", "must be a number in (0, 1]" + got(g.smoothing));
  return {};
}

namespace detail {

AdaptiveEstimator::AdaptiveEstimator(const AdaptiveLimitConfig& config) noexcept
    : config_(&config), estimate_(config.initial_limit) {}

double AdaptiveEstimator::clamp(double v) const noexcept {
  return std::clamp(v, static_cast<double>(config_->min_limit),
                    static_cast<double>(config_->max_limit));
}

std::uint32_t AdaptiveEstimator::fold(const AdaptiveWindow& w) noexcept {
  const bool has_rtt = w.timed > 0;
  // At least 1 ns: calls that took no time on the clock must not make a zero divisor.
  const double rtt = has_rtt ? std::max(1.0, static_cast<double>(w.rtt_sum) / w.timed) : 0.0;
  switch (config_->algorithm) {
    case AdaptiveAlgorithm::aimd:
      aimd(w, rtt, has_rtt);
      break;
    case AdaptiveAlgorithm::vegas:
      vegas(w, rtt, has_rtt);
      break;
    case AdaptiveAlgorithm::gradient2:
      gradient2(w, rtt, has_rtt);
      break;
  }
  return static_cast<std::uint32_t>(estimate_);  // clamped, so within [min, max]
}

void AdaptiveEstimator::aimd(const AdaptiveWindow& w, double rtt, bool has_rtt) noexcept {
  const AimdConfig& a = config_->aimd;
  if (w.dropped || (has_rtt && rtt > static_cast<double>(a.timeout.count()))) {
    estimate_ = clamp(estimate_ * a.backoff_ratio);
  } else if (2.0 * w.max_in_flight >= estimate_) {
    // Grow only while the limit is in use: an idle dependency proves nothing.
    estimate_ = clamp(estimate_ + a.increase);
  }
}

void AdaptiveEstimator::vegas(const AdaptiveWindow& w, double rtt, bool has_rtt) noexcept {
  const VegasConfig& v = config_->vegas;
  const double step = std::max(1.0, std::log10(estimate_));
  if (has_rtt) {
    if (++since_probe_ >= v.probe_every) {
      // Re-probe: the round trip of now becomes the no-load round trip.
      since_probe_ = 0;
      rtt_noload_ = rtt;
      return;
    }
    if (rtt_noload_ == 0 || rtt < rtt_noload_) {
      rtt_noload_ = rtt;
      return;
    }
  }
  double target = 0;
  if (w.dropped) {
    target = estimate_ - step;
  } else if (!has_rtt || 2.0 * w.max_in_flight < estimate_) {
    return;
  } else {
    const double queue = estimate_ * (1.0 - rtt_noload_ / rtt);
    if (queue < v.alpha * step) {
      target = estimate_ + step;
    } else if (queue > v.beta * step) {
      target = estimate_ - step;
    } else {
      return;
    }
  }
  estimate_ = clamp((1.0 - v.smoothing) * estimate_ + v.smoothing * clamp(target));
}

void AdaptiveEstimator::gradient2(const AdaptiveWindow& w, double rtt, bool has_rtt) noexcept {
  const Gradient2Config& g = config_->gradient2;
  if (has_rtt) {
    ++long_count_;
    if (long_count_ <= g.warmup) {
      long_rtt_ += (rtt - long_rtt_) / long_count_;
    } else {
      const double f = 2.0 / (g.long_window + 1.0);
      long_rtt_ = long_rtt_ * (1.0 - f) + rtt * f;
    }
    // The long average lags a recovery: when it is twice the short one, pull it down.
    if (long_rtt_ / rtt > 2.0) long_rtt_ *= 0.95;
  }
  double gradient = 0.5;
  if (!w.dropped) {
    if (!has_rtt) return;
    if (2.0 * w.max_in_flight < estimate_) return;  // not using the limit: no evidence
    gradient = std::clamp(g.tolerance * long_rtt_ / rtt, 0.5, 1.0);
  }
  const double target = estimate_ * gradient + g.queue_size;
  estimate_ = clamp((1.0 - g.smoothing) * estimate_ + g.smoothing * target);
}

}  // namespace detail

namespace prometheus {

void write_adaptive_limits(std::ostream& out, std::span<const AdaptiveLimitReading> readings,
                           std::string_view prefix) {
  std::vector<std::string> labels;
  labels.reserve(readings.size());
  for (const AdaptiveLimitReading& r : readings) {
    std::string l = "name=\"";
    append_label_value(l, r.name);
    l.push_back('"');
    labels.push_back(std::move(l));
  }
  Writer w(out);
  const std::string p(prefix);
  struct Family {
    const char* suffix;
    const char* type;
    const char* help;
    std::uint64_t (*value)(const AdaptiveLimitSnapshot&);
  };
  static constexpr Family kFamilies[] = {
      {"_adaptive_limit", "gauge", "Calls the adaptive limit admits at once now.",
       [](const AdaptiveLimitSnapshot& s) -> std::uint64_t { return s.limit; }},
      {"_adaptive_inflight", "gauge", "Calls admitted by the adaptive limit and not yet settled.",
       [](const AdaptiveLimitSnapshot& s) -> std::uint64_t { return s.in_flight; }},
      {"_adaptive_rejections_total", "counter", "Calls the adaptive limit refused.",
       [](const AdaptiveLimitSnapshot& s) -> std::uint64_t { return s.rejected; }},
      {"_adaptive_drops_total", "counter", "Calls settled as dropped (timed out or shed).",
       [](const AdaptiveLimitSnapshot& s) -> std::uint64_t { return s.dropped; }},
  };
  for (const Family& f : kFamilies) {
    const std::string name = p + f.suffix;
    w.family(name, f.type, f.help);
    for (std::size_t i = 0; i < readings.size(); ++i)
      w.sample(name, "", labels[i], "", f.value(readings[i].snapshot));
  }
}

}  // namespace prometheus
}  // namespace bulwark
