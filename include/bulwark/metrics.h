// bulwark/metrics.h — what a breaker (and the policies around it) can tell a dashboard.
//
// Two layers:
//   * Readings: plain structs of numbers, taken from live objects when something asks
//     (a Prometheus scrape, a test). `read_breaker(breaker)` is the one adapter from a
//     breaker's snapshot to a BreakerReading; every exporter reads breakers through it,
//     so a new snapshot field is exposed by changing one function.
//   * BreakerMetrics: the counters a breaker does not keep itself, written on the call
//     path: a latency histogram with fixed log-scale buckets, transitions counted by
//     from/to, and the counters of the policies around the breaker (fallbacks, retries,
//     retry-budget exhaustion, bulkhead in use / rejected). Lock-free and allocation-
//     free: every update is one or two relaxed atomic adds on the breaker's own block.
//
// What a breaker already counts (state, time in state, calls by outcome, rejections,
// openings) costs nothing extra: it is read from its snapshot. A registry keeps a
// BreakerMetrics block per key only when asked (RegistryOptions::detailed_metrics), as
// it costs sizeof(BreakerMetrics) (~450 bytes) per key.
//
//   bulwark::BreakerMetrics metrics;
//   bulwark::ListenerId id = metrics.track(policy, &breaker);   // transitions + outage
//   if (auto permit = breaker.try_acquire()) {
//     const auto t0 = clock.now();
//     auto r = call();
//     const auto took = clock.now() - t0;
//     permit->record(r ? Outcome::success : Outcome::failure, took);
//     metrics.latency.observe(took);
//   }
//   bulwark::BreakerReading now = bulwark::read_breaker(breaker);
//   policy.remove_listener(id);                                 // before `metrics` dies
//
// Thread-safety: every update and read may run concurrently from any thread. Readings
// are taken field by field (relaxed loads), so under traffic they may disagree by the
// calls in between, as BreakerSnapshot does; each counter is exact and monotonic.

#ifndef BULWARK_METRICS_H_
#define BULWARK_METRICS_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "bulwark/breaker_events.h"
#include "bulwark/clock.h"
#include "bulwark/observe.h"
#include "bulwark/outcome.h"

namespace bulwark {

// ---------------------------------------------------------------------------
// Latency histogram
// ---------------------------------------------------------------------------

// Fixed log-scale bucket bounds, in seconds: 1-2.5-5 per decade from 0.5 ms to 50 s
// (Prometheus' default buckets, widened at both ends), plus +Inf. Fixed so that every
// breaker's histogram can be summed with every other's (histogram_quantile over
// sum by (le)), and so that observing is a bit_width and at most two compares.
struct LatencyBuckets {
  static constexpr std::size_t kFinite = 16;
  static constexpr std::size_t kCount = kFinite + 1;  // the last one is +Inf
  static constexpr std::array<std::int64_t, kFinite> kUpperNanos = {
      500'000,       1'000'000,      2'500'000,      5'000'000,     10'000'000,    25'000'000,
      50'000'000,    100'000'000,    250'000'000,    500'000'000,   1'000'000'000, 2'500'000'000,
      5'000'000'000, 10'000'000'000, 25'000'000'000, 50'000'000'000};
  // The same bounds as Prometheus `le` label values.
  static constexpr std::array<std::string_view, kCount> kLabels = {
      "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
      "0.5",    "1",     "2.5",    "5",     "10",   "25",    "50",   "+Inf"};

  // The bucket a duration falls in: the first whose bound is >= it (Prometheus' `le`).
  // Negative durations count as zero.
  static constexpr std::size_t index(Nanos d) noexcept {
    const std::uint64_t v = d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : 0;
    std::size_t i = kStart[static_cast<std::size_t>(std::bit_width(v))];
    while (i < kFinite && static_cast<std::uint64_t>(kUpperNanos[i]) < v) ++i;
    return i;
  }

 private:
  // kStart[b]: how many bounds are below 2^(b-1), the smallest value of bit width b.
  static constexpr std::array<std::size_t, 65> kStart = [] {
    std::array<std::size_t, 65> s{};
    for (std::size_t b = 0; b <= 64; ++b) {
      const std::uint64_t lo = b == 0 ? 0 : std::uint64_t{1} << (b - 1);
      std::size_t n = 0;
      while (n < kFinite && static_cast<std::uint64_t>(kUpperNanos[n]) < lo) ++n;
      s[b] = n;
    }
    return s;
  }();
};

// Per-bucket (not cumulative) counts and the sum of observed durations.
struct HistogramReading {
  std::array<std::uint64_t, LatencyBuckets::kCount> buckets{};
  std::uint64_t sum_nanos = 0;

  std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (std::uint64_t b : buckets) n += b;
    return n;
  }
  void add(const HistogramReading& o) noexcept {
    for (std::size_t i = 0; i < buckets.size(); ++i) buckets[i] += o.buckets[i];
    sum_nanos += o.sum_nanos;
  }
};

// A lock-free latency histogram. observe() is two relaxed atomic adds; no allocation.
class LatencyHistogram {
 public:
  void observe(Nanos d) noexcept {
    buckets_[LatencyBuckets::index(d)].fetch_add(1, std::memory_order_relaxed);
    sum_nanos_.fetch_add(d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : 0,
                         std::memory_order_relaxed);
  }
  HistogramReading read() const noexcept {
    HistogramReading r;
    for (std::size_t i = 0; i < r.buckets.size(); ++i)
      r.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
    r.sum_nanos = sum_nanos_.load(std::memory_order_relaxed);
    return r;
  }
  // Zeroes every counter. Not concurrent with observe() (used when reusing a block).
  void reset() noexcept {
    for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
    sum_nanos_.store(0, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<std::uint64_t>, LatencyBuckets::kCount> buckets_{};
  std::atomic<std::uint64_t> sum_nanos_{0};
};

// ---------------------------------------------------------------------------
// Transitions by (from, to)
// ---------------------------------------------------------------------------

inline constexpr std::size_t kStateCount = 6;
// Every ordered pair of distinct states.
inline constexpr std::size_t kTransitionPairs = kStateCount * (kStateCount - 1);

constexpr std::size_t transition_index(State from, State to) noexcept {
  const auto f = static_cast<std::size_t>(from), t = static_cast<std::size_t>(to);
  return f * (kStateCount - 1) + (t < f ? t : t - 1);
}
constexpr State transition_from(std::size_t index) noexcept {
  return static_cast<State>(index / (kStateCount - 1));
}
constexpr State transition_to(std::size_t index) noexcept {
  const std::size_t f = index / (kStateCount - 1), t = index % (kStateCount - 1);
  return static_cast<State>(t < f ? t : t + 1);
}

using TransitionReading = std::array<std::uint64_t, kTransitionPairs>;

class TransitionCounts {
 public:
  void count(State from, State to) noexcept {
    if (from != to) counts_[transition_index(from, to)].fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t get(State from, State to) const noexcept {
    return from == to ? 0 : counts_[transition_index(from, to)].load(std::memory_order_relaxed);
  }
  TransitionReading read() const noexcept {
    TransitionReading r{};
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = counts_[i].load(std::memory_order_relaxed);
    return r;
  }
  void reset() noexcept {
    for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<std::uint64_t>, kTransitionPairs> counts_{};
};

// ---------------------------------------------------------------------------
// The policies around a breaker: fallback, retry, retry budget, bulkhead
// ---------------------------------------------------------------------------

// Resilience4j's retry outcome kinds (resilience4j_retry_calls_total{kind=...}).
enum class RetryCallKind : std::uint8_t {
  successful_without_retry = 0,
  successful_with_retry = 1,
  failed_with_retry = 2,
  failed_without_retry = 3,
};

constexpr std::string_view to_string(RetryCallKind k) noexcept {
  switch (k) {
    case RetryCallKind::successful_without_retry:
      return "successful_without_retry";
    case RetryCallKind::successful_with_retry:
      return "successful_with_retry";
    case RetryCallKind::failed_with_retry:
      return "failed_with_retry";
    case RetryCallKind::failed_without_retry:
      return "failed_without_retry";
  }
  return "unknown";
}

// Duck-typed views of bulkhead.h, retry.h and retry_budget.h, so that this header
// needs none of them: anything whose snapshot() has these fields can be read. A
// registry's per-key Extra reports its components with a member
//   void read_metrics(bulwark::ComponentReading& r) { r.add_bulkhead(bulkhead);
//   r.add_budget(budget); }
// which registries and the Prometheus exposition call when they read the key.
template <class T>
concept BulkheadLike = requires(T& t) {
  { t.snapshot().in_use } -> std::convertible_to<std::uint64_t>;
  { t.snapshot().max_concurrent } -> std::convertible_to<std::uint64_t>;
  { t.snapshot().rejected } -> std::convertible_to<std::uint64_t>;
};
template <class T>
concept RetryBudgetLike = requires(T& t) {
  { t.snapshot().tokens } -> std::convertible_to<double>;
  { t.snapshot().withdrawn } -> std::convertible_to<std::uint64_t>;
  { t.snapshot().rejected } -> std::convertible_to<std::uint64_t>;
};
template <class T>
concept RetryLike = requires(T& t) {
  { t.snapshot().retries } -> std::convertible_to<std::uint64_t>;
  { t.snapshot().exhausted } -> std::convertible_to<std::uint64_t>;
  { t.snapshot().budget_stops } -> std::convertible_to<std::uint64_t>;
};

// What the policies around one breaker report. Each group is exposed only if some
// source filled it (has_*), so a registry without bulkheads has no bulkhead series.
struct ComponentReading {
  bool has_fallback = false;
  std::array<std::uint64_t, 2> fallbacks{};  // by FallbackKind

  bool has_retry = false;
  std::array<std::uint64_t, 4> retry_calls{};  // by RetryCallKind
  std::uint64_t retries = 0;                   // re-attempts started
  std::uint64_t retry_budget_exhausted = 0;    // retries refused by the budget

  bool has_budget = false;
  double budget_tokens = 0;  // retries the budget would allow now

  bool has_bulkhead = false;
  std::uint64_t bulkhead_in_use = 0;
  std::uint64_t bulkhead_max = 0;  // 0: unknown (only counted, no Bulkhead attached)
  std::uint64_t bulkhead_rejected = 0;

  // Reads another engineer's components (bulkhead.h, retry.h, retry_budget.h).
  // (Forwarding references: RetryBudget::snapshot() accrues its floor, so it is not
  // const; a const component works when its snapshot() is.)
  template <class B>
  requires BulkheadLike<std::remove_reference_t<B>>
  void add_bulkhead(B&& b) noexcept {
    const auto s = b.snapshot();
    has_bulkhead = true;
    bulkhead_in_use += static_cast<std::uint64_t>(s.in_use);
    bulkhead_max += static_cast<std::uint64_t>(s.max_concurrent);
    bulkhead_rejected += static_cast<std::uint64_t>(s.rejected);
  }
  template <class R>
  requires RetryBudgetLike<std::remove_reference_t<R>>
  void add_budget(R&& r) noexcept {
    const auto s = r.snapshot();
    has_budget = true;
    budget_tokens += static_cast<double>(s.tokens);
    has_retry = true;
    retry_budget_exhausted += static_cast<std::uint64_t>(s.rejected);
  }
  template <class R>
  requires RetryLike<std::remove_reference_t<R>>
  void add_retry(R&& r) noexcept {
    const auto s = r.snapshot();
    has_retry = true;
    retries += static_cast<std::uint64_t>(s.retries);
    // A retry that counts its calls by kind (retry.h's RetrySnapshot does).
    if constexpr (requires { s.successful_without_retry; }) {
      retry_calls[0] += static_cast<std::uint64_t>(s.successful_without_retry);
      retry_calls[1] += static_cast<std::uint64_t>(s.successful_with_retry);
      retry_calls[2] += static_cast<std::uint64_t>(s.failed_with_retry);
      retry_calls[3] += static_cast<std::uint64_t>(s.failed_without_retry);
    }
  }

  // Sums another reading into this one (registry totals).
  void merge(const ComponentReading& o) noexcept;
  // Sums only the counters (and the has_* flags) of another reading, not its gauges
  // (budget tokens, bulkhead slots in use and limit): what an evicted key leaves in its
  // registry's totals, which must never decrease.
  void merge_counters(const ComponentReading& o) noexcept;
};

// Counters a pipeline or an integration bumps for one breaker. Each is one relaxed
// atomic add (plus a load the first time a group is used, to mark it present).
// This is the hook for components that do not count by themselves: a pipeline stage
// given a BreakerMetrics* calls these; components that do count (Bulkhead,
// RetryBudget) are read instead (ComponentReading::add_*).
class ComponentCounters {
 public:
  void record_fallback(FallbackKind k) noexcept {
    use(kFallbackBit);
    fallbacks_[static_cast<std::size_t>(k)].fetch_add(1, std::memory_order_relaxed);
  }
  // For a pipeline's fallback stage: `bulwark::fallback(f).counted_by(counters)`.
  void on_fallback(bool rejected) noexcept {
    record_fallback(rejected ? FallbackKind::rejected : FallbackKind::failed);
  }
  // Once per logical call that went through a retry stage, with how it ended.
  void record_retry_call(RetryCallKind k) noexcept {
    use(kRetryBit);
    retry_calls_[static_cast<std::size_t>(k)].fetch_add(1, std::memory_order_relaxed);
  }
  void record_retry() noexcept {
    use(kRetryBit);
    retries_.fetch_add(1, std::memory_order_relaxed);
  }
  void record_retry_budget_exhausted() noexcept {
    use(kRetryBit);
    budget_exhausted_.fetch_add(1, std::memory_order_relaxed);
  }
  // A bulkhead slot was taken / given back / refused.
  void bulkhead_acquired() noexcept {
    use(kBulkheadBit);
    bulkhead_in_use_.fetch_add(1, std::memory_order_relaxed);
  }
  void bulkhead_released() noexcept { bulkhead_in_use_.fetch_sub(1, std::memory_order_relaxed); }
  void bulkhead_rejected() noexcept {
    use(kBulkheadBit);
    bulkhead_rejected_.fetch_add(1, std::memory_order_relaxed);
  }

  void read_into(ComponentReading& r) const noexcept;
  void reset() noexcept;

 private:
  static constexpr std::uint32_t kFallbackBit = 1, kRetryBit = 2, kBulkheadBit = 4;
  void use(std::uint32_t bit) noexcept {
    if ((used_.load(std::memory_order_relaxed) & bit) == 0)
      used_.fetch_or(bit, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> used_{0};
  std::array<std::atomic<std::uint64_t>, 2> fallbacks_{};
  std::array<std::atomic<std::uint64_t>, 4> retry_calls_{};
  std::atomic<std::uint64_t> retries_{0};
  std::atomic<std::uint64_t> budget_exhausted_{0};
  std::atomic<std::int64_t> bulkhead_in_use_{0};
  std::atomic<std::uint64_t> bulkhead_rejected_{0};
};

// ---------------------------------------------------------------------------
// A breaker's reading, through one adapter
// ---------------------------------------------------------------------------

// Everything an exporter shows about one breaker, as plain numbers.
struct BreakerReading {
  State state = State::closed;
  Nanos time_in_state{0};
  // Calls by outcome, since the breaker was built. `slow_*` are subsets of
  // successes/failures (a slow success is still a success), as in Resilience4j.
  std::uint64_t successes = 0;
  std::uint64_t failures = 0;
  std::uint64_t ignored = 0;
  std::uint64_t cancelled = 0;
  std::uint64_t rejected = 0;  // not permitted
  std::uint64_t opens = 0;
  bool has_slow = false;  // the breaker classifies slow calls
  std::uint64_t slow_successes = 0;
  std::uint64_t slow_failures = 0;
  // Failure and slow-call rates over the breaker's window, as ratios in [0, 1]; NaN
  // while the window holds fewer than minimum_calls ("not enough calls") or while the
  // breaker is not counting (OPEN, HALF_OPEN). Only breakers with a window have them.
  bool has_rates = false;
  double failure_rate = std::numeric_limits<double>::quiet_NaN();
  double slow_call_rate = std::numeric_limits<double>::quiet_NaN();
  // What the window holds now (zeros while it holds nothing): Resilience4j's buffered
  // and slow calls.
  bool has_window = false;
  std::uint64_t window_calls = 0;
  std::uint64_t window_failures = 0;
  std::uint64_t window_slow_successes = 0;
  std::uint64_t window_slow_failures = 0;
  bool has_flapping = false;
  bool flapping = false;
};

namespace detail {

// A rate as the breaker reports it: optional<double> (nullopt = not enough calls) or a
// double where a negative value (Resilience4j's -1) means not enough calls.
template <class R>
double rate_value(const R& r) noexcept {
  if constexpr (requires {
                  r.has_value();
                  *r;
                }) {
    return r.has_value() ? static_cast<double>(*r) : std::numeric_limits<double>::quiet_NaN();
  } else {
    const double v = static_cast<double>(r);
    return v < 0 ? std::numeric_limits<double>::quiet_NaN() : v;
  }
}

// Whether a breaker type keeps a sliding window (its rates mean something). Decided by
// the type, not by a snapshot: the window reads empty while the breaker is OPEN, and a
// series must not come and go with the state.
template <class Breaker>
constexpr bool breaker_has_window() noexcept {
  if constexpr (requires { typename Breaker::window_type; }) {
    return !std::is_same_v<typename Breaker::window_type, NoWindow>;
  } else {
    return true;  // a breaker that reports rates without saying what window it has
  }
}

}  // namespace detail

// THE adapter from a breaker's snapshot to what exporters show. Fields the breaker
// does not have (slow-call totals, rates, window counts, flapping) are detected at
// compile time and reported as absent; when the breaker gains one, it appears in every
// exporter. Cost: one snapshot() (relaxed loads, the window's counts, and one clock
// read). Thread-safe.
template <class Breaker>
BreakerReading read_breaker(const Breaker& breaker) noexcept {
  const auto s = breaker.snapshot();
  BreakerReading r;
  r.state = s.state;
  r.time_in_state = s.time_in_state;
  r.successes = s.successes;
  r.failures = s.failures;
  r.ignored = s.ignored;
  r.cancelled = s.cancelled;
  r.rejected = s.rejected;
  r.opens = s.opens;
  // Monotonic slow-call totals (subsets of successes / failures), when the breaker
  // keeps them.
  if constexpr (requires { s.slow_successes + s.slow_failures; }) {
    r.has_slow = true;
    r.slow_successes = static_cast<std::uint64_t>(s.slow_successes);
    r.slow_failures = static_cast<std::uint64_t>(s.slow_failures);
  }
  constexpr bool windowed = detail::breaker_has_window<Breaker>();
  if constexpr (windowed && requires { s.failure_rate, s.slow_call_rate; }) {
    r.has_rates = true;
    r.failure_rate = detail::rate_value(s.failure_rate);
    r.slow_call_rate = detail::rate_value(s.slow_call_rate);
  }
  if constexpr (windowed && requires { s.window->calls + s.window->slow_failures; }) {
    r.has_window = true;
    if (s.window.has_value()) {
      r.window_calls = static_cast<std::uint64_t>(s.window->calls);
      r.window_failures = static_cast<std::uint64_t>(s.window->failures);
      r.window_slow_successes = static_cast<std::uint64_t>(s.window->slow_successes);
      r.window_slow_failures = static_cast<std::uint64_t>(s.window->slow_failures);
    }
  }
  if constexpr (requires { s.flapping; }) {
    r.has_flapping = true;
    r.flapping = static_cast<bool>(s.flapping);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Outage: how long a breaker has been away from CLOSED
// ---------------------------------------------------------------------------

namespace detail {

inline constexpr Ticks kNoOutage = kTicksMin;

// OPEN, HALF_OPEN and FORCED_OPEN are one outage: a breaker whose probes keep failing
// goes OPEN -> HALF_OPEN -> OPEN every open period, and "open for more than 5 minutes"
// must still fire for it. DISABLED and METRICS_ONLY admit everything: no outage.
constexpr bool is_outage_state(State s) noexcept {
  return s == State::open || s == State::half_open || s == State::forced_open;
}

// Updates `since` for a transition (called from a transition listener).
inline void note_outage(std::atomic<Ticks>& since, State from, State to, Ticks at) noexcept {
  if (!is_outage_state(to)) {
    since.store(kNoOutage, std::memory_order_relaxed);
  } else if (!is_outage_state(from) || since.load(std::memory_order_relaxed) == kNoOutage) {
    since.store(at, std::memory_order_relaxed);
  }
}

// Seconds since the breaker left CLOSED; 0 when it is not in an outage. If the
// listener has not recorded the start yet (it runs just after the state changes), the
// time in the current state is the best lower bound.
inline double outage_seconds(const BreakerReading& r, Ticks since, Ticks now) noexcept {
  if (!is_outage_state(r.state)) return 0.0;
  const Ticks d =
      since == kNoOutage ? r.time_in_state.count() : std::max<Ticks>(0, saturating_sub(now, since));
  return static_cast<double>(d) / 1e9;
}

}  // namespace detail

// ---------------------------------------------------------------------------
// The per-breaker block
// ---------------------------------------------------------------------------

// What BreakerMetrics reports, as plain numbers.
struct DetailReading {
  HistogramReading latency;
  TransitionReading transitions{};
  ComponentReading components;
};

// The counters a breaker does not keep itself. One per breaker (a registry allocates
// one per key when RegistryOptions::detailed_metrics is set). Not movable: transition
// listeners point at it.
class alignas(64) BreakerMetrics {
 public:
  BreakerMetrics() = default;
  BreakerMetrics(const BreakerMetrics&) = delete;
  BreakerMetrics& operator=(const BreakerMetrics&) = delete;

  // Latency of calls that reported a duration (both outcomes, slow or not). Only
  // calls given an explicit, non-zero duration are observed (record_call(), or a
  // registry Call's record(outcome, duration)): a call reported without one is not
  // timed here, even if a breaker that judges slowness measured it for its own rules.
  // Time your calls and pass the duration if you want them in the histogram.
  LatencyHistogram latency;
  TransitionCounts transitions;
  ComponentCounters components;

  // Records one call's duration; a zero duration means "not timed" and is skipped.
  void record_call(Nanos duration) noexcept {
    if (duration > Nanos::zero()) latency.observe(duration);
  }
  // Counts a transition and follows the outage (see open_seconds()).
  void on_transition(State from, State to, Ticks at) noexcept {
    transitions.count(from, to);
    detail::note_outage(outage_since_, from, to, at);
  }
  // For a standalone breaker: counts the transitions of `breaker` (a breaker built
  // from `policy`). Returns the listener's id: remove it (policy.remove_listener)
  // before this block is destroyed. Allocates (the listener).
  template <class Policy>
  ListenerId track(Policy& policy, const void* breaker) {
    return policy.on_transition([this, breaker](const TransitionEvent& e) {
      if (e.breaker == breaker) on_transition(e.from, e.to, e.at);
    });
  }

  // When the current outage began (clock ticks), or detail::kNoOutage.
  Ticks outage_since() const noexcept { return outage_since_.load(std::memory_order_relaxed); }

  DetailReading read() const noexcept {
    DetailReading r;
    r.latency = latency.read();
    r.transitions = transitions.read();
    components.read_into(r.components);
    return r;
  }
  // Zeroes everything. Not concurrent with updates (a registry reusing the block).
  void reset() noexcept {
    latency.reset();
    transitions.reset();
    components.reset();
    outage_since_.store(detail::kNoOutage, std::memory_order_relaxed);
  }

 private:
  std::atomic<Ticks> outage_since_{detail::kNoOutage};
};

// ---------------------------------------------------------------------------
// Registry totals
// ---------------------------------------------------------------------------

// The sum over every breaker a registry holds or held (evicted keys' counters are
// folded in when they go, so these totals never decrease).
struct RegistryReading {
  std::string_view name;
  std::uint64_t keys = 0;     // live now
  std::uint64_t created = 0;  // since the registry was built
  std::uint64_t evicted = 0;
  std::uint64_t memory_bytes = 0;
  std::array<std::uint64_t, kStateCount> breakers_by_state{};
  double max_open_seconds = 0;  // the longest current outage among its breakers

  std::uint64_t successes = 0, failures = 0, ignored = 0, cancelled = 0, rejected = 0, opens = 0;
  bool has_slow = false;
  std::uint64_t slow_successes = 0, slow_failures = 0;
  TransitionReading transitions{};
  bool has_detail = false;  // latency and components are summed from per-key blocks
  HistogramReading latency;
  ComponentReading components;

  // Adds one breaker's counters.
  void add(const BreakerReading& b) noexcept {
    successes += b.successes;
    failures += b.failures;
    ignored += b.ignored;
    cancelled += b.cancelled;
    rejected += b.rejected;
    opens += b.opens;
    has_slow = has_slow || b.has_slow;
    slow_successes += b.slow_successes;
    slow_failures += b.slow_failures;
  }
};

}  // namespace bulwark

#endif  // BULWARK_METRICS_H_
