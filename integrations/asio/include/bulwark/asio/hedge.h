// bulwark/asio/hedge.h — hedged attempts: ask again when the first answer is late.
//
// A dependency that usually answers in 20 ms but sometimes in 2 s (a GC pause, a slow
// replica) makes the slow answers the caller's tail latency. Hedging (Polly's hedging
// strategy, failsafe-go's HedgePolicy, Finagle's backup requests) starts another
// attempt when the first has not answered after a delay — a fixed one, or a chosen
// percentile of the dependency's recent latencies, so only the slowest few percent of
// calls are hedged. The first success to end wins as soon as it ends (however it
// ends: a call that answers without suspending too) and the other attempts are
// cancelled.
//
//   bulwark::asio::LatencyTracker reviews_latency;          // one per dependency
//   auto call = bulwark::asio::pipeline(
//       bulwark::breaker(b), bulwark::retry(r),
//       bulwark::asio::hedge({.max_hedges = 1,
//                             .delay = bulwark::asio::HedgeDelay::percentile(reviews_latency, 0.95,
//                                                                             50ms)}),
//       bulwark::timeout(800ms));                            // each hedged attempt's own
//
// In a pipeline the hedge stage sits between the retry and the timeout: the group of
// hedged attempts is one attempt for the retry and for the breaker (the breaker sees
// one outcome per call, or per retry attempt with BreakerScope::attempt); each hedged
// attempt has its own per-attempt timeout. Every hedge withdraws a token from the
// retry budget (the retry stage's, or the one given here) and is not started when the
// budget refuses it: hedges are extra load, paid for like retries. When every
// attempt started so far has failed, no further hedge starts: the group ends with the
// last failure, and the retry stage decides what follows.
//
// LatencyTracker cost: record() is two relaxed atomic stores into a ring of 256
// samples and, every 32nd record, an O(256) selection to refresh the cached
// percentiles (no allocation: a stack buffer); reading a percentile is one load.
// Thread-safety: every member may be called concurrently (samples are relaxed: a
// percentile reflects recent calls, not an exact instant).
//
// Lifetimes: a hedge stage holds pointers to its tracker(s) and budget; they must
// outlive every call made through a pipeline holding the stage. A call ended early (its
// io_context destroyed, its caller's cancellation) records nothing in the tracker, and
// the tokens of hedges it started stay spent (pipeline.h, Lifetimes).

#ifndef BULWARK_ASIO_HEDGE_H_
#define BULWARK_ASIO_HEDGE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/expected.h"
#include "bulwark/retry_budget.h"

namespace bulwark::asio {

// The latencies of a dependency's recent successful calls, and their percentiles.
class LatencyTracker {
 public:
  static constexpr std::size_t kSamples = 256;
  static constexpr std::uint32_t kRefreshEvery = 32;

  // Records one call's latency (negative durations count as zero).
  void record(Nanos latency) noexcept;
  // The cached q-quantile (0 < q <= 1, e.g. 0.95) of the recent samples, refreshed
  // every kRefreshEvery records; zero until `min_samples()` calls have been recorded.
  Nanos percentile(double q) const noexcept;
  // Calls recorded so far.
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  // Samples needed before percentile() answers.
  static constexpr std::uint64_t min_samples() noexcept { return kRefreshEvery; }

 private:
  void refresh() noexcept;

  std::array<std::atomic<std::int64_t>, kSamples> samples_{};
  std::atomic<std::uint64_t> count_{0};
  // Cached quantiles 0.50, 0.75, 0.90, 0.95, 0.99, 0.999 and max; other q's round up.
  static constexpr std::array<double, 7> kQuantiles{0.50, 0.75, 0.90, 0.95, 0.99, 0.999, 1.0};
  std::array<std::atomic<std::int64_t>, 7> cached_{};
};

// When a hedge starts: a fixed delay after the previous attempt started, or the
// tracker's chosen percentile (with `fallback` until it has enough samples, and
// never less than `floor`).
class HedgeDelay {
 public:
  static HedgeDelay fixed(Nanos d) noexcept { return HedgeDelay(d, nullptr, 0, d); }
  static HedgeDelay percentile(const LatencyTracker& tracker, double q, Nanos fallback,
                               Nanos floor = std::chrono::milliseconds(1)) noexcept {
    return HedgeDelay(fallback, &tracker, q, floor);
  }

  // The delay to use now: one load for a percentile.
  Nanos now() const noexcept {
    if (tracker_ == nullptr) return fallback_;
    const Nanos p = tracker_->percentile(q_);
    if (p <= Nanos::zero()) return fallback_;
    return p < floor_ ? floor_ : p;
  }
  const LatencyTracker* tracker() const noexcept { return tracker_; }
  double quantile() const noexcept { return q_; }
  Nanos fallback() const noexcept { return fallback_; }

 private:
  HedgeDelay(Nanos fallback, const LatencyTracker* t, double q, Nanos floor) noexcept
      : fallback_(fallback), tracker_(t), q_(q), floor_(floor) {}
  Nanos fallback_;
  const LatencyTracker* tracker_;
  double q_;
  Nanos floor_;
};

struct HedgeConfig {
  // Extra attempts allowed in one group, besides the first. 1..3.
  std::uint32_t max_hedges = 1;
  // When the next hedge starts (after the previous attempt of the group started).
  HedgeDelay delay = HedgeDelay::fixed(std::chrono::milliseconds(50));
  // The tracker the pipeline records each group's winning latency in — the winner's
  // own, from its start to its end, not the caller's wait (usually the one `delay`
  // reads); none: nothing is recorded.
  LatencyTracker* record_to = nullptr;
};

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const HedgeConfig& config);

inline constexpr std::uint32_t kMaxHedges = 3;

// The hedge stage of an async pipeline (pipeline.h). HedgeStage<C> pays for hedges
// from its own budget on clock C when the pipeline's retry stage has none;
// HedgeStage<void> only from the retry stage's.
template <class C = void>
struct HedgeStage {
  static constexpr int kAsyncRank = 35;  // between the retry (30) and the timeout (40)
  using clock_type = C;
  HedgeConfig config;
  BasicRetryBudget<C>* budget;
};
template <>
struct HedgeStage<void> {
  static constexpr int kAsyncRank = 35;
  HedgeConfig config;
  static constexpr std::nullptr_t budget = nullptr;
};

// Hedging paid for from the pipeline's retry budget (if it has one). Throws
// InvalidConfig (aborts without exceptions) for an invalid config.
HedgeStage<void> hedge(HedgeConfig config);
// Hedging paid for from `budget` when the pipeline's retry stage has no budget.
template <class C>
HedgeStage<C> hedge(HedgeConfig config, BasicRetryBudget<C>& budget) {
  return {bulwark::detail::validated(std::move(config)), &budget};
}

}  // namespace bulwark::asio

#endif  // BULWARK_ASIO_HEDGE_H_
