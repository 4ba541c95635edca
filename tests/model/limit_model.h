// The reference model of the adaptive concurrency limit (adaptive_limit.h): one thread,
// plain doubles and a vector of the window's samples, written from the header's
// contract rather than from src/adaptive_limit.cc. The differential test plays the same
// random trace on it and on a BasicAdaptiveLimit<ManualClock> and compares them after
// every step.

#ifndef BULWARK_TESTS_MODEL_LIMIT_MODEL_H_
#define BULWARK_TESTS_MODEL_LIMIT_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "bulwark/adaptive_limit.h"

namespace bulwark::model {

class LimitModel {
 public:
  struct Held {
    Ticks start;
    std::uint32_t in_flight;  // counting itself, at its admission
  };
  struct Sample {
    bool dropped;
    Ticks rtt;
    std::uint32_t in_flight;
  };

  LimitModel(const AdaptiveLimitConfig& c, Ticks now)
      : c_(c), estimate_(c.initial_limit), limit_(c.initial_limit), window_start_(now) {}

  // True if admitted (and then held.back() is the new call).
  bool acquire(Ticks now) {
    if (in_flight_ + 1 > limit_) {
      ++rejected_;
      return false;
    }
    ++in_flight_;
    held.push_back({now, in_flight_});
    return true;
  }

  // Settles held[i]: complete (rtt < 0: measured from admission), drop, or cancel.
  enum class How { complete, drop, cancel };
  void settle(std::size_t i, How how, Ticks now, Ticks given_rtt = -1) {
    const Held h = held[i];
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    --in_flight_;
    if (how == How::cancel) return;
    if (how == How::drop) ++dropped_;
    Ticks rtt = given_rtt >= 0 ? given_rtt : now - h.start;
    if (rtt < 0) rtt = 0;  // a clock stepped back: no time passed
    window_.push_back({how == How::drop, rtt, h.in_flight});
    const Ticks elapsed = std::max<Ticks>(0, now - window_start_);
    if (window_.size() >= c_.window_samples && elapsed >= c_.min_window.count()) close(now);
  }

  std::uint32_t limit() const { return limit_; }
  std::uint32_t in_flight() const { return in_flight_; }
  std::uint64_t rejected() const { return rejected_; }
  std::uint64_t dropped() const { return dropped_; }
  std::uint64_t windows() const { return windows_; }
  double estimate() const { return estimate_; }

  std::vector<Held> held;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> events;  // (from, to)

 private:
  double clamp(double v) const {
    return std::min(std::max(v, double(c_.min_limit)), double(c_.max_limit));
  }

  void close(Ticks now) {
    bool dropped = false;
    double sum = 0;
    int timed = 0;
    std::uint32_t max_in_flight = 0;
    for (const Sample& s : window_) {
      if (s.dropped) {
        dropped = true;
      } else {
        sum += double(s.rtt);
        ++timed;
      }
      max_in_flight = std::max(max_in_flight, s.in_flight);
    }
    window_.clear();
    window_start_ = now;
    ++windows_;
    const bool has_rtt = timed > 0;
    const double rtt = has_rtt ? std::max(1.0, sum / timed) : 0;  // a mean is at least 1 ns
    const bool busy = 2.0 * max_in_flight >= estimate_;           // the limit is at least half used

    switch (c_.algorithm) {
      case AdaptiveAlgorithm::aimd:
        if (dropped || (has_rtt && rtt > double(c_.aimd.timeout.count()))) {
          estimate_ = clamp(estimate_ * c_.aimd.backoff_ratio);
        } else if (busy) {
          estimate_ = clamp(estimate_ + c_.aimd.increase);
        }
        break;
      case AdaptiveAlgorithm::vegas:
        vegas(dropped, has_rtt, rtt, busy);
        break;
      case AdaptiveAlgorithm::gradient2:
        gradient2(dropped, has_rtt, rtt, busy);
        break;
    }
    const auto next = static_cast<std::uint32_t>(estimate_);
    if (next != limit_) events.emplace_back(limit_, next);
    limit_ = next;
  }

  void vegas(bool dropped, bool has_rtt, double rtt, bool busy) {
    const VegasConfig& v = c_.vegas;
    const double step = std::max(1.0, std::log10(estimate_));
    if (has_rtt) {
      ++since_probe_;
      if (since_probe_ >= v.probe_every) {  // re-probe: this round trip is the new minimum
        since_probe_ = 0;
        rtt_min_ = rtt;
        return;
      }
      if (rtt_min_ == 0 || rtt < rtt_min_) {  // a new minimum: nothing else this window
        rtt_min_ = rtt;
        return;
      }
    }
    double target;
    if (dropped) {
      target = estimate_ - step;
    } else if (!has_rtt || !busy) {
      return;
    } else {
      const double queue = estimate_ * (1.0 - rtt_min_ / rtt);
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

  void gradient2(bool dropped, bool has_rtt, double rtt, bool busy) {
    const Gradient2Config& g = c_.gradient2;
    if (has_rtt) {
      ++long_n_;
      if (long_n_ <= g.warmup) {
        long_ += (rtt - long_) / long_n_;  // the running mean of the first windows
      } else {
        const double f = 2.0 / (g.long_window + 1.0);
        long_ = long_ * (1.0 - f) + rtt * f;
      }
      if (long_ / rtt > 2.0) long_ *= 0.95;
    }
    double gradient = 0.5;  // a drop: the steepest decrease
    if (!dropped) {
      if (!has_rtt || !busy) return;
      gradient = std::min(1.0, std::max(0.5, g.tolerance * long_ / rtt));
    }
    const double target = estimate_ * gradient + g.queue_size;
    estimate_ = clamp((1.0 - g.smoothing) * estimate_ + g.smoothing * target);
  }

  AdaptiveLimitConfig c_;
  double estimate_;
  std::uint32_t limit_;
  std::uint32_t in_flight_ = 0;
  std::uint64_t rejected_ = 0, dropped_ = 0, windows_ = 0;
  std::vector<Sample> window_;
  Ticks window_start_;
  double rtt_min_ = 0;
  std::uint32_t since_probe_ = 0;
  double long_ = 0;
  std::uint32_t long_n_ = 0;
};

}  // namespace bulwark::model

#endif  // BULWARK_TESTS_MODEL_LIMIT_MODEL_H_
