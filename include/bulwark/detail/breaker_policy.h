// Internal: the shared block behind a BreakerPolicy. Not part of the public API;
// circuit_breaker.h includes it.
//
// PolicyCore holds the validated configuration in the form the state machine reads
// (rules, precomputed open periods, ramp fractions) plus the listener lists; PolicyData
// adds the clock and the configuration as given. One is allocated per policy and
// reference-counted by every policy copy and breaker that uses it.

#ifndef BULWARK_DETAIL_BREAKER_POLICY_H_
#define BULWARK_DETAIL_BREAKER_POLICY_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "bulwark/breaker_config.h"
#include "bulwark/breaker_events.h"
#include "bulwark/clock.h"
#include "bulwark/detail/breaker_word.h"
#include "bulwark/sliding_window.h"

namespace bulwark {

namespace detail {

// The validated, precomputed part of a policy that does not depend on the clock.
struct PolicyCore {
  // Validates `spec` (a time window's buckets against `bucket_capacity`); raises
  // InvalidConfig naming the field.
  PolicyCore(BreakerSpec spec, std::uint32_t bucket_capacity);
  PolicyCore(const PolicyCore&) = delete;
  PolicyCore& operator=(const PolicyCore&) = delete;

  // open_period[r]: how long the r-th consecutive opening lasts (r >= 1), already
  // multiplied and capped; [0] equals [1].
  Ticks open_period(std::uint32_t reopens) const noexcept { return open_periods_[reopens]; }

  // A uniform draw in [0, 1) for fraction-mode half-open.
  double draw() const noexcept;
  bool fraction_mode() const noexcept { return stage_fraction_[0] > 0; }
  double stage_fraction(std::uint32_t stage) const noexcept { return stage_fraction_[stage]; }

  std::atomic<std::uint32_t> refs{1};
  const BreakerSpec spec;
  const std::uint32_t consecutive_failures;
  const std::uint32_t half_open_max_calls;
  const std::uint32_t half_open_successes;
  const Ticks half_open_max_wait;
  const double failure_rate;    // < 0: rule off
  const double slow_call_rate;  // < 0: rule off
  const std::uint32_t minimum_calls;
  const Ticks slow_call_duration;  // 0: slowness not judged
  const Ticks flapping_period;
  const WindowParams window;
  std::uint32_t last_stage = 0;                   // fraction mode: index of the last ramp stage
  ListenerList<TransitionEvent> listeners{1, 2};  // odd ids
  ListenerList<RejectionEvent> rejection_listeners{2, 2};  // even ids

 private:
  std::array<Ticks, Word::kReopenMax + 1> open_periods_{};
  std::array<double, Word::kStageMax + 1> stage_fraction_{};
  mutable std::atomic<std::uint64_t> rng_;
};

template <class W>
constexpr std::uint32_t window_capacity() noexcept {
  if constexpr (W::kind == WindowKind::time) {
    return W::capacity;
  } else {
    return 0;
  }
}

// A policy's shared block: the core, the clock, and the configuration as given.
template <Clock C, class Config>
struct PolicyData : PolicyCore {
  PolicyData(Config cfg, ClockRef<C> clk, std::uint32_t bucket_capacity)
      : PolicyCore(spec_of(cfg), bucket_capacity), clock(clk), config(std::move(cfg)) {}
  const ClockRef<C> clock;
  const Config config;
};

// True for the breaker configuration types; the others are not mistaken for one.
template <class T>
inline constexpr bool is_breaker_config_v =
    std::is_same_v<T, BreakerConfig> || std::is_same_v<T, CountWindowConfig> ||
    std::is_same_v<T, TimeWindowConfig>;

}  // namespace detail

}  // namespace bulwark

#endif  // BULWARK_DETAIL_BREAKER_POLICY_H_
