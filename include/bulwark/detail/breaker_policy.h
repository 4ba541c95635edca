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
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

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
  Ticks open_period(std::uint32_t reopens) const noexcept {
    return open_periods_[reopens].load(std::memory_order_relaxed);
  }

  // Takes `next`'s thresholds (the fields listed at BreakerPolicy::reconfigure) for
  // the decisions made from now on. `next` must have been checked like the spec given
  // at construction, with every other field equal. Each field is stored on its own
  // (relaxed): a decision racing with it may see some old and some new thresholds.
  void retune(const BreakerSpec& next) noexcept;

  // A uniform draw in [0, 1) for fraction-mode half-open.
  double draw() const noexcept;
  bool fraction_mode() const noexcept { return stage_fraction_[0] > 0; }
  double stage_fraction(std::uint32_t stage) const noexcept { return stage_fraction_[stage]; }

  std::atomic<std::uint32_t> refs{1};
  const BreakerSpec spec;
  // The thresholds reconfigure() may change are atomics, read where they are used (a
  // plain load on x86-64 and AArch64's ldar: no lock, nothing more on the call path).
  std::atomic<std::uint32_t> consecutive_failures;
  const std::uint32_t half_open_max_calls;
  const std::uint32_t half_open_successes;
  std::atomic<Ticks> half_open_max_wait;
  std::atomic<double> failure_rate;    // < 0: rule off
  std::atomic<double> slow_call_rate;  // < 0: rule off
  std::atomic<std::uint32_t> minimum_calls;
  const Ticks slow_call_duration;  // 0: slowness not judged
  std::atomic<Ticks> flapping_period;
  const WindowParams window;
  std::uint32_t last_stage = 0;                   // fraction mode: index of the last ramp stage
  ListenerList<TransitionEvent> listeners{1, 2};  // odd ids
  ListenerList<RejectionEvent> rejection_listeners{2, 2};  // even ids

 private:
  void set_open_periods(const BreakerSpec& s) noexcept;
  std::array<std::atomic<Ticks>, Word::kReopenMax + 1> open_periods_{};
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
// The configuration as given is kept by pointer: reconfigure() publishes a new one and
// keeps every earlier one until the block dies, so a reference config() returned stays
// valid as long as the policy.
template <Clock C, class Config>
struct PolicyData : PolicyCore {
  PolicyData(Config cfg, ClockRef<C> clk, std::uint32_t bucket_capacity)
      : PolicyCore(spec_of(cfg), bucket_capacity), clock(clk), spec_now(spec) {
    configs.push_back(std::make_unique<const Config>(std::move(cfg)));
    config.store(configs.back().get(), std::memory_order_release);
  }
  const ClockRef<C> clock;
  std::atomic<const Config*> config{nullptr};
  std::mutex reconfigure_mutex;  // reconfigure() only: never on a call path
  BreakerSpec spec_now;          // the latest configuration's; under reconfigure_mutex
  std::vector<std::unique_ptr<const Config>> configs;
};

// Checks that `next` changes only what a live breaker can take (the thresholds);
// raises InvalidConfig naming the first other field that differs.
void check_retunable(const BreakerSpec& now, const BreakerSpec& next);

// True for the breaker configuration types; the others are not mistaken for one.
template <class T>
inline constexpr bool is_breaker_config_v =
    std::is_same_v<T, BreakerConfig> || std::is_same_v<T, CountWindowConfig> ||
    std::is_same_v<T, TimeWindowConfig>;

}  // namespace detail

}  // namespace bulwark

#endif  // BULWARK_DETAIL_BREAKER_POLICY_H_
