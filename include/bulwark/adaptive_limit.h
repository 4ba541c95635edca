// bulwark/adaptive_limit.h — a concurrency limit that finds itself from latency.
//
// A fixed bulkhead needs its size guessed: too small wastes capacity, too large lets a
// slow dependency queue work until every caller times out. An adaptive limit measures
// each call's round-trip time and whether it was dropped (timed out, shed), and moves
// its limit the way TCP moves a congestion window (as Netflix's concurrency-limits and
// Envoy's adaptive concurrency filter do). Three algorithms (AdaptiveAlgorithm):
//
//   aimd       +increase per window while the limit is in use; ×backoff_ratio on a drop
//              or a window whose mean round trip exceeds `timeout`.
//   vegas      queue = limit × (1 − rtt_min / rtt): grows by log10(limit) while the
//              queue is under alpha×log10(limit), shrinks above beta×log10(limit), and
//              every `probe_every` windows takes the window's round trip as the new
//              rtt_min (so a dependency that got slower for good is re-learned).
//   gradient2  gradient = clamp(tolerance × long-term / short-term round trip, 0.5, 1);
//              new = limit × gradient + queue_size, smoothed. The long-term figure is an
//              exponential average over `long_window` windows; the short-term one is
//              the window's mean. A drop counts as the lowest gradient.
//
//   bulwark::AdaptiveLimit reviews({.name = "reviews", .min_limit = 4, .max_limit = 400});
//
//   if (auto permit = reviews.try_acquire()) {   // a load and an add: never waits
//     auto r = call_reviews();
//     if (r.timed_out()) permit->drop(); else permit->complete();   // rtt from the clock
//   } else {
//     respond_503();                              // permit.error().limit: the limit now
//   }                                             // a permit not settled is ignored
//
// Laziness. There is no thread and no timer. Completions are added to a sample window
// (a few atomic adds); the completion that fills a window — `window_samples` samples,
// and at least `min_window` since the last one closed — folds it into the algorithm
// and publishes the new limit. Folding needs the window's owner flag, taken with one
// exchange: a completion that doesn't get it just leaves (nothing ever waits), and the
// window stays open for the next one. The work per completion is bounded (one fold at
// most, a few floating-point operations). Time is the injected clock's (clock.h): with
// a ManualClock and one thread everything is deterministic.
//
// Admission is one relaxed load of the limit, one atomic add to in-flight (undone if it
// went past the limit) and one clock read for the round trip (coarse_clock makes it a
// cheap one); no lock, no allocation.
// Racing admissions can each see a stale limit: the admitted calls never exceed the
// largest limit any of them read, and in-flight (the counter) may run past it by at
// most the number of threads inside try_acquire() at once, for the instant before
// their undo. At rest (no call inside try_acquire) in_flight() is exact.
//
// Completions. complete() (a round trip measured from admission on the limiter's
// clock, or given) and drop() feed the algorithm; a permit destroyed or cancel()ed
// unsettled is ignored — it frees its slot and says nothing about the dependency.
// A window's mean round trip counts as at least 1 ns (calls that took no time on a
// ManualClock or a coarse clock). Single-threaded a window holds exactly its samples; under
// concurrency a completion racing the fold may count in one window and add its round trip to the
// next.
//
// Observability: snapshot() (limit, in-flight, rejections, drops, windows), limit
// changes as events to listeners (add_listener; run by the folding thread, after the
// change is published, with nothing held; two folds on two threads may deliver their
// events in either order), and prometheus::write_adaptive_limits(). Costs, measured
// against the bulkhead: docs/performance.md; when to use which: docs/overload.md.
//
// Thread-safety: every member function may be called concurrently. A Permit belongs to
// one call; move it, don't share it. Destroying the limiter with permits out, or from
// a listener, is a precondition violation.

#ifndef BULWARK_ADAPTIVE_LIMIT_H_
#define BULWARK_ADAPTIVE_LIMIT_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "bulwark/breaker_events.h"
#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/detail/permit_base.h"
#include "bulwark/error_traits.h"
#include "bulwark/expected.h"
#include "bulwark/fallback.h"
#include "bulwark/outcome.h"

namespace bulwark {

enum class AdaptiveAlgorithm : std::uint8_t { aimd, vegas, gradient2 };

constexpr std::string_view to_string(AdaptiveAlgorithm a) noexcept {
  switch (a) {
    case AdaptiveAlgorithm::aimd:
      return "aimd";
    case AdaptiveAlgorithm::vegas:
      return "vegas";
    case AdaptiveAlgorithm::gradient2:
      return "gradient2";
  }
  return "unknown";
}

struct AimdConfig {
  // Multiplies the limit on a drop (or a slow window). In (0, 1).
  double backoff_ratio = 0.9;
  // Added per window in which the limit was at least half used. > 0.
  double increase = 1.0;
  // A window whose mean round trip exceeds this counts as a drop. > 0.
  Nanos timeout = std::chrono::seconds(5);
};

struct VegasConfig {
  // Grow while the estimated queue is below alpha × max(1, log10(limit)). > 0.
  double alpha = 3.0;
  // Shrink while it is above beta × max(1, log10(limit)). >= alpha.
  double beta = 6.0;
  // Every this many windows with a round trip, that window's mean becomes rtt_min
  // (the dependency is re-probed). >= 1.
  std::uint32_t probe_every = 100;
  // Weight of the new value: limit = (1 − s) × limit + s × new. In (0, 1].
  double smoothing = 1.0;
};

struct Gradient2Config {
  // How much slower than the long-term average the short term may get before the
  // limit shrinks. >= 1.
  double tolerance = 1.5;
  // Windows the long-term average spans (factor 2 / (long_window + 1)). >= 1.
  std::uint32_t long_window = 600;
  // The first windows are a plain mean (the average warms up). >= 1.
  std::uint32_t warmup = 10;
  // Headroom added to the limit each window, so it can probe upwards. >= 0.
  double queue_size = 4.0;
  // Weight of the new value, as Vegas's. In (0, 1].
  double smoothing = 0.2;
};

struct AdaptiveLimitConfig {
  // Identifies the limiter in errors, events and metrics.
  std::string name = "default";
  AdaptiveAlgorithm algorithm = AdaptiveAlgorithm::gradient2;
  // The limit stays within [min_limit, max_limit] and starts at initial_limit.
  std::uint32_t min_limit = 1;       // >= 1
  std::uint32_t max_limit = 1000;    // >= min_limit
  std::uint32_t initial_limit = 20;  // in [min_limit, max_limit]
  // A window closes at its window_samples-th settled call (>= 1), once at least
  // min_window (0 to 10 s) has passed since the previous one closed.
  std::uint32_t window_samples = 10;
  Nanos min_window = Nanos::zero();
  // Time round trips with the clock's coarse reading (clock.h: 1-4 ms steps on Linux,
  // several times cheaper than a precise read). A window's mean stays unbiased but is
  // noisy for calls much shorter than a step: for round trips of tens of ms and more.
  bool coarse_clock = false;
  AimdConfig aimd;
  VegasConfig vegas;
  Gradient2Config gradient2;
};

// Checks every field; the error names the first one that is wrong (e.g. "vegas.beta").
Expected<void, ConfigError> validate(const AdaptiveLimitConfig& config);

struct AdaptiveLimitRejection {
  std::uint32_t limit;  // the limit the refused call was measured against
};

// Each field is read atomically, not all at once.
struct AdaptiveLimitSnapshot {
  std::uint32_t limit;      // calls admitted at once now
  std::uint32_t in_flight;  // admitted and not yet settled
  std::uint64_t rejected;   // refused since construction
  std::uint64_t dropped;    // settled with drop() since construction
  std::uint64_t windows;    // sample windows folded since construction
};

// A change of the limit.
struct AdaptiveLimitEvent {
  const void* limiter;    // its identity (address)
  std::string_view name;  // AdaptiveLimitConfig::name; valid during the call only
  std::uint32_t from;
  std::uint32_t to;
  Ticks at;  // the limiter's clock when the window closed
};

namespace detail {

// What a closed window says. Plain data: the algorithms are pure functions of it.
struct AdaptiveWindow {
  std::uint32_t samples = 0;        // settled calls (completed and dropped)
  std::uint32_t timed = 0;          // completed calls, which carry a round trip
  std::uint64_t rtt_sum = 0;        // their round trips, nanoseconds
  std::uint32_t max_in_flight = 0;  // the most in flight at any of their admissions
  bool dropped = false;             // any drop()
};

// The algorithms' state, touched only by the window's owner. Not thread-safe.
class AdaptiveEstimator {
 public:
  explicit AdaptiveEstimator(const AdaptiveLimitConfig& config) noexcept;
  // Folds one window; returns the limit to publish.
  std::uint32_t fold(const AdaptiveWindow& w) noexcept;
  double estimate() const noexcept { return estimate_; }

 private:
  void aimd(const AdaptiveWindow& w, double rtt, bool has_rtt) noexcept;
  void vegas(const AdaptiveWindow& w, double rtt, bool has_rtt) noexcept;
  void gradient2(const AdaptiveWindow& w, double rtt, bool has_rtt) noexcept;
  double clamp(double v) const noexcept;

  const AdaptiveLimitConfig* config_;
  double estimate_;
  double rtt_noload_ = 0;          // vegas: rtt_min, 0 = not yet known
  std::uint32_t since_probe_ = 0;  // vegas: windows with a round trip since the probe
  double long_rtt_ = 0;            // gradient2
  std::uint32_t long_count_ = 0;   // gradient2: windows in the long average
};

}  // namespace detail

template <Clock C = SteadyClock>
class BasicAdaptiveLimit {
  struct PermitTraits {
    using Owner = BasicAdaptiveLimit;
    struct Data {
      Ticks start = 0;
      std::uint32_t in_flight = 0;
    };
    static void abandon(BasicAdaptiveLimit& l, const Data&) noexcept { l.leave(); }
  };

 public:
  using clock_type = C;
  using Listener = std::function<void(const AdaptiveLimitEvent&)>;

  // One admitted call. Move-only; settle it once with complete() or drop(), or let it
  // go (cancel() or destruction): an unsettled permit frees its slot and is ignored.
  class [[nodiscard]] Permit
      : public detail::PermitBase<typename BasicAdaptiveLimit::PermitTraits> {
   public:
    // The call succeeded; its round trip is measured from admission (one clock read).
    void complete() noexcept {
      if (auto* l = this->take())
        l->settle(this->data(), saturating_sub(l->now(), this->data().start), false);
    }
    // The call succeeded after `rtt` (measured by the caller): no clock read.
    void complete(Nanos rtt) noexcept {
      if (auto* l = this->take()) l->settle(this->data(), rtt.count(), false);
    }
    // The call was dropped: timed out, shed, or refused for overload.
    void drop() noexcept {
      if (auto* l = this->take()) l->settle(this->data(), 0, true);
    }
    // Frees the slot and tells the limit nothing. Idempotent.
    void cancel() noexcept { this->abandon(); }

   private:
    friend class BasicAdaptiveLimit;
    Permit(BasicAdaptiveLimit* l, typename PermitTraits::Data d) noexcept
        : detail::PermitBase<typename BasicAdaptiveLimit::PermitTraits>(l, d) {}
  };

  // Validates `config` (throws InvalidConfig naming the field). A stateful clock must
  // outlive the limiter.
  explicit BasicAdaptiveLimit(AdaptiveLimitConfig config) requires std::is_empty_v<C>
      : config_(checked(std::move(config))), clock_(), estimator_(config_) {
    init();
  }
  BasicAdaptiveLimit(AdaptiveLimitConfig config, const C& clock)
      : config_(checked(std::move(config))), clock_(clock), estimator_(config_) {
    init();
  }
  BasicAdaptiveLimit(AdaptiveLimitConfig, const C&&) = delete;
  BasicAdaptiveLimit(const BasicAdaptiveLimit&) = delete;
  BasicAdaptiveLimit& operator=(const BasicAdaptiveLimit&) = delete;

  // Admits a call if fewer than limit() are in flight. Never blocks, never allocates.
  Expected<Permit, AdaptiveLimitRejection> try_acquire() noexcept {
    const std::uint32_t limit = limit_.load(std::memory_order_relaxed);
    const std::uint32_t n = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n > limit) {
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      rejected_.fetch_add(1, std::memory_order_relaxed);
      return Unexpected(AdaptiveLimitRejection{limit});
    }
    return Permit(this, {now(), n});
  }

  std::uint32_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  std::uint32_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
  AdaptiveLimitSnapshot snapshot() const noexcept {
    return {limit(), in_flight(), rejected_.load(std::memory_order_relaxed),
            dropped_.load(std::memory_order_relaxed), windows_.load(std::memory_order_relaxed)};
  }
  const AdaptiveLimitConfig& config() const noexcept { return config_; }
  const C& clock() const noexcept requires(!std::is_empty_v<C>) { return clock_.get(); }

  // Feeds the algorithm one call admitted by someone else (a load shedder counting its
  // own slots: see AdaptiveLimitSource): `rtt` its round trip, `dropped` as drop(), and
  // `in_flight` the calls in flight when it was admitted (its window's utilisation).
  // Takes and frees no slot of this limiter's. Cost and thread-safety as complete().
  void record(Nanos rtt, bool dropped, std::uint32_t in_flight) noexcept {
    sample(in_flight, rtt.count(), dropped);
  }

  // Calls `listener` on every change of the limit, on the thread that folded the
  // window, after the new limit is published. Takes a mutex (not on a call's path).
  ListenerId add_listener(Listener listener) { return listeners_.add(std::move(listener)); }
  // Once it returns, the listener is not running on another thread (breaker_events.h).
  bool remove_listener(ListenerId id) { return listeners_.remove(id); }

 private:
  static AdaptiveLimitConfig checked(AdaptiveLimitConfig config) {
    if (auto ok = validate(config); !ok) detail::raise_config_error(std::move(ok).error());
    return config;
  }
  void init() noexcept {
    limit_.store(config_.initial_limit, std::memory_order_relaxed);
    window_start_.store(now(), std::memory_order_relaxed);
  }
  Ticks now() const noexcept {
    return config_.coarse_clock ? coarse_now_ticks(clock_.get()) : now_ticks(clock_.get());
  }

  void leave() noexcept { in_flight_.fetch_sub(1, std::memory_order_relaxed); }

  void settle(const typename PermitTraits::Data& d, Ticks rtt, bool dropped) noexcept {
    leave();
    sample(d.in_flight, rtt, dropped);
  }

  void sample(std::uint32_t in_flight, Ticks rtt, bool dropped) noexcept {
    if (dropped) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      w_dropped_.store(true, std::memory_order_relaxed);
    } else {
      w_rtt_sum_.fetch_add(static_cast<std::uint64_t>(std::max<Ticks>(rtt, 0)),
                           std::memory_order_relaxed);
    }
    std::uint32_t seen = w_max_in_flight_.load(std::memory_order_relaxed);
    while (seen < in_flight &&
           !w_max_in_flight_.compare_exchange_weak(seen, in_flight, std::memory_order_relaxed)) {
    }
    // One add counts the sample and, unless dropped, the timed sample (high half).
    const std::uint64_t add = dropped ? 1 : kTimedOne + 1;
    const auto n =
        static_cast<std::uint32_t>(w_counts_.fetch_add(add, std::memory_order_acq_rel) + add);
    if (n >= config_.window_samples) maybe_fold();
  }

  // Closes the window if it is due and nobody else is closing it. Never waits.
  void maybe_fold() noexcept {
    const bool timed = config_.min_window > Nanos::zero();
    Ticks t = 0;
    if (timed) {
      t = now();
      if (saturating_sub(t, window_start_.load(std::memory_order_relaxed)) <
          config_.min_window.count())
        return;
    }
    if (owner_.exchange(true, std::memory_order_acquire)) return;
    // Another owner may have closed this window between our add and the exchange.
    if (static_cast<std::uint32_t>(w_counts_.load(std::memory_order_relaxed)) <
        config_.window_samples) {
      owner_.store(false, std::memory_order_release);
      return;
    }
    if (!timed) t = now();
    detail::AdaptiveWindow w;
    const std::uint64_t counts = w_counts_.exchange(0, std::memory_order_acq_rel);
    w.samples = static_cast<std::uint32_t>(counts);
    w.timed = static_cast<std::uint32_t>(counts / kTimedOne);
    w.rtt_sum = w_rtt_sum_.exchange(0, std::memory_order_relaxed);
    w.max_in_flight = w_max_in_flight_.exchange(0, std::memory_order_relaxed);
    w.dropped = w_dropped_.exchange(false, std::memory_order_relaxed);
    window_start_.store(t, std::memory_order_relaxed);
    const std::uint32_t from = limit_.load(std::memory_order_relaxed);
    const std::uint32_t to = estimator_.fold(w);
    limit_.store(to, std::memory_order_relaxed);
    windows_.fetch_add(1, std::memory_order_relaxed);
    owner_.store(false, std::memory_order_release);
    if (from != to && !listeners_.empty())
      listeners_.emit(AdaptiveLimitEvent{this, config_.name, from, to, t});
  }

  const AdaptiveLimitConfig config_;
  [[no_unique_address]] const detail::ClockRef<C> clock_;
  detail::AdaptiveEstimator estimator_;  // under owner_
  detail::ListenerList<AdaptiveLimitEvent> listeners_;
  alignas(64) std::atomic<std::uint32_t> limit_{0};
  alignas(64) std::atomic<std::uint32_t> in_flight_{0};
  std::atomic<std::uint64_t> rejected_{0};
  static constexpr std::uint64_t kTimedOne = std::uint64_t{1} << 32;
  // The window's samples (low half) and completed samples (high half).
  alignas(64) std::atomic<std::uint64_t> w_counts_{0};
  std::atomic<std::uint64_t> w_rtt_sum_{0};
  std::atomic<std::uint32_t> w_max_in_flight_{0};
  std::atomic<bool> w_dropped_{false};
  std::atomic<bool> owner_{false};
  std::atomic<Ticks> window_start_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> windows_{0};
};

using AdaptiveLimit = BasicAdaptiveLimit<SteadyClock>;

// The adaptive limit as a load shedder's LimitSource (load_shedder.h):
//
//   bulwark::AdaptiveLimit limit({.name = "api", .min_limit = 8, .max_limit = 512});
//   bulwark::BasicLoadShedder<bulwark::AdaptiveLimitSource> shedder({.name = "api"},
//                                                                  bulwark::AdaptiveLimitSource(limit));
//
// The shedder counts its own slots against limit(); each permit it gives back feeds the
// algorithm (record()) with the time it was held, whether it was dropped (Permit::drop(),
// or held past its request's deadline) and the requests in flight when it was admitted.
// A waiter refused by the queue's controlled delay is a drop only with
// `queue_timeout_is_drop`: off by default, because a queue forms whenever demand exceeds
// the limit, also a limit below the service's capacity, and counting it would push such a
// limit further down rather than up. The limiter's own try_acquire() is not used (its
// in_flight() stays 0 unless other callers use it too). A pointer: copyable; the limiter
// must outlive the shedder. Thread-safe as the limiter.
template <Clock C = SteadyClock>
class BasicAdaptiveLimitSource {
 public:
  explicit BasicAdaptiveLimitSource(BasicAdaptiveLimit<C>& limit,
                                    bool queue_timeout_is_drop = false) noexcept
      : limit_(&limit), queue_timeout_is_drop_(queue_timeout_is_drop) {}
  std::size_t limit() const noexcept { return limit_->limit(); }
  void on_sample(Nanos rtt, bool dropped, std::size_t in_flight) noexcept {
    limit_->record(rtt, dropped,
                   static_cast<std::uint32_t>(std::min<std::size_t>(
                       in_flight, std::numeric_limits<std::uint32_t>::max())));
  }
  void on_sample(Nanos rtt, bool dropped) noexcept { on_sample(rtt, dropped, 0); }
  // A waiter refused after waiting `waited` in the queue (controlled delay).
  void on_queue_timeout(Nanos waited) noexcept {
    if (queue_timeout_is_drop_) limit_->record(waited, true, 0);
  }
  BasicAdaptiveLimit<C>& limiter() const noexcept { return *limit_; }

 private:
  BasicAdaptiveLimit<C>* limit_;
  bool queue_timeout_is_drop_;
};
using AdaptiveLimitSource = BasicAdaptiveLimitSource<SteadyClock>;

// The adaptive limit as a pipeline stage, in the bulkhead's place (pipeline.h; the
// asio pipeline takes it too). A call it refuses fails with Reason::bulkhead_full at
// Stage::bulkhead, at once. A call that ran is settled by how it ended: a success
// completes (round trip from admission), a timeout (Reason::timeout, or an attempt
// that timed out) or a last error that says the dependency is overloaded
// (is_overload(), error_traits.h: an HTTP 429 or 503) drops, anything else — another
// error of the dependency's own, a cancellation, an exception — is ignored.
template <class L>
struct AdaptiveLimitStage {
  static constexpr int kOrder = 2;
  using clock_type = typename L::clock_type;
  L* limiter;

  // Settles `permit` for a call that made `attempts` attempts, the last ending with
  // `last` (nullopt: cancelled), and whose result is `out`.
  template <class Out>
  static void settle(typename L::Permit& permit, const Out& out, std::uint32_t attempts,
                     std::optional<Outcome> last) noexcept {
    if (attempts == 0 || !last) return;
    if (!out &&
        (out.error().reason == Reason::timeout || out.error().timed_out ||
         (*last == Outcome::failure && out.error().error && is_overload(*out.error().error)))) {
      permit.drop();
    } else if (*last == Outcome::success) {
      permit.complete();
    }
  }
};
template <class C>
constexpr AdaptiveLimitStage<BasicAdaptiveLimit<C>> adaptive_limit(
    BasicAdaptiveLimit<C>& l) noexcept {
  return {&l};
}

namespace prometheus {

// One limiter's reading for write_adaptive_limits().
struct AdaptiveLimitReading {
  std::string_view name;
  AdaptiveLimitSnapshot snapshot;
};
template <class C>
AdaptiveLimitReading reading(const BasicAdaptiveLimit<C>& l) noexcept {
  return {l.config().name, l.snapshot()};
}

// Writes, per limiter (label: name), as prometheus.h names its families:
//   <prefix>_adaptive_limit               gauge: calls admitted at once now
//   <prefix>_adaptive_inflight            gauge: calls in flight
//   <prefix>_adaptive_rejections_total    counter
//   <prefix>_adaptive_drops_total         counter: calls settled as dropped
// Allocates; reads nothing but `readings`.
void write_adaptive_limits(std::ostream& out, std::span<const AdaptiveLimitReading> readings,
                           std::string_view prefix = "bulwark");

}  // namespace prometheus
}  // namespace bulwark

#endif  // BULWARK_ADAPTIVE_LIMIT_H_
