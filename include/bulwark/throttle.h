// bulwark/throttle.h — client-side adaptive throttling (Google SRE, "Handling Overload").
//
// Each client remembers, over a sliding window (2 minutes by default), how many
// requests it made and how many the dependency accepted, and turns a request away
// itself, before sending it, with probability
//
//   p = max(0, (requests − K·accepts) / (requests + 1))
//
// A healthy dependency (accepts ≈ requests) gives p = 0: nothing is rejected while
// requests < K·accepts. When the dependency sheds load, accepts fall and the client
// sends only about K times what gets accepted, so the dependency spends its capacity
// serving rather than refusing. Requests the client rejected itself count as requests
// (not accepts), which is what makes p rise; as accepts return, p falls back to 0.
//
//   bulwark::Throttle throttle({.name = "search", .k = 2.0});
//   if (auto ok = throttle.try_acquire(); !ok) return unavailable();   // local rejection
//   auto r = call();
//   throttle.record(accepted(r));       // false: the dependency refused it (overload)
//
// In a pipeline: bulwark::throttle(t) (pipeline.h) counts the call's outcome through a
// classifier (default: ThrottleAccepts, below).
//
// Counters: `buckets` slots, each one atomic 64-bit word packing its bucket number
// (16 bits), requests and accepts (24 bits each, saturating at 16,777,215 per bucket).
// A slot still holding an older bucket is reset by the first request that lands in it:
// rotation is lazy, driven by the clock (coarse reading); no thread, no timer. The
// bucket number wraps: a slot left untouched since a whole multiple of 65,536 bucket
// widths ago, give or take a window (about 7.6 days with the default 10 s buckets),
// would be counted again until the next request overwrites it.
//
// Cost: try_acquire() reads the coarse clock and the `buckets` words (12 relaxed loads
// by default) and draws a random number only when p > 0; record() is one CAS. A
// rejection adds one relaxed increment. No lock and no allocation on the call path
// (the constructor allocates the slots).
// Thread-safety: every member function may be called concurrently.

#ifndef BULWARK_THROTTLE_H_
#define BULWARK_THROTTLE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "bulwark/backoff.h"
#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/error_traits.h"
#include "bulwark/expected.h"
#include "bulwark/fallback.h"
#include "bulwark/outcome.h"

namespace bulwark {

struct ThrottleConfig {
  // Identifies the throttle in errors and metrics.
  std::string name = "default";
  // The multiplier K: the client sends up to K times what the dependency accepts.
  // Finite, >= 1 (SRE recommends 2; larger is more lenient, slower to react).
  double k = 2.0;
  // The sliding window over which requests and accepts are counted. >= buckets ns.
  Nanos window = std::chrono::minutes(2);
  // Slots the window is cut into (its resolution). 1..256.
  std::uint32_t buckets = 12;
  // Seeds the throttle's own generator (SplitMix64 over one atomic counter), so a
  // test draws the same sequence every run; empty: the per-thread generator.
  std::optional<std::uint64_t> seed = std::nullopt;
};

// Checks every field; the error names the first one that is wrong.
inline Expected<void, ConfigError> validate(const ThrottleConfig& c) {
  const std::string who = "throttle '" + c.name + "'";
  auto bad = [&](const char* field, std::string msg) -> Expected<void, ConfigError> {
    return Unexpected(ConfigError{who, field, std::move(msg)});
  };
  if (c.name.empty()) return bad("name", "must not be empty");
  if (!(c.k >= 1.0) || c.k > 1e9) {
    return bad("k", "must be a finite number >= 1 (got " + std::to_string(c.k) + ")");
  }
  if (c.buckets == 0 || c.buckets > 256) {
    return bad("buckets", "must be in 1..256 (got " + std::to_string(c.buckets) + ")");
  }
  if (c.window.count() < static_cast<Ticks>(c.buckets)) {
    return bad("window", "must be at least one nanosecond per bucket (got " +
                             detail::format_duration(c.window) + ")");
  }
  return {};
}

// A local rejection: the probability it was drawn with.
struct Throttled {
  double probability = 0;
};

// The throttle's window now, and totals since it was built.
struct ThrottleSnapshot {
  std::string name;
  std::uint64_t requests = 0;  // in the window, local rejections included
  std::uint64_t accepts = 0;   // in the window
  double reject_probability = 0;
  std::uint64_t throttled = 0;  // local rejections since the throttle was built
};

template <Clock C = SteadyClock>
class BasicThrottle {
 public:
  using clock_type = C;

  // Validates (throws InvalidConfig naming the field; aborts without exceptions).
  explicit BasicThrottle(ThrottleConfig config, const C& clock = C{})
      : config_(checked(std::move(config))),
        clock_(clock),
        width_(config_.window.count() / static_cast<Ticks>(config_.buckets)),
        slots_(std::make_unique<std::atomic<std::uint64_t>[]>(config_.buckets)),
        rng_(config_.seed.value_or(0)) {}
  BasicThrottle(const BasicThrottle&) = delete;
  BasicThrottle& operator=(const BasicThrottle&) = delete;

  // Admits the request, or rejects it locally with the current probability (counting
  // it as a request that was not accepted). An admitted request must be reported with
  // record() once the dependency answered.
  Expected<void, Throttled> try_acquire() noexcept {
    const Ticks now = coarse_now_ticks(clock_.get());
    const double p = probability(now);
    if (p <= 0.0 || draw() >= p) return {};
    add(now, 1, 0);
    throttled_.fetch_add(1, std::memory_order_relaxed);
    return Unexpected(Throttled{p});
  }

  // Counts one admitted request, accepted by the dependency or not.
  void record(bool accepted) noexcept { add(coarse_now_ticks(clock_.get()), 1, accepted ? 1 : 0); }

  // p = max(0, (requests − K·accepts) / (requests + 1)) over the window now.
  double reject_probability() const noexcept { return probability(coarse_now_ticks(clock_.get())); }

  ThrottleSnapshot snapshot() const {
    const auto [req, acc] = totals(coarse_now_ticks(clock_.get()));
    return {config_.name, req, acc, formula(req, acc), throttled_.load(std::memory_order_relaxed)};
  }

  const ThrottleConfig& config() const noexcept { return config_; }

 private:
  static constexpr unsigned kEpochBits = 16;
  static constexpr unsigned kCountBits = 24;
  static constexpr std::uint64_t kCountMax = (std::uint64_t{1} << kCountBits) - 1;
  static constexpr std::uint64_t kEpochMask = (std::uint64_t{1} << kEpochBits) - 1;

  static ThrottleConfig checked(ThrottleConfig c) {
    if (auto ok = validate(c); !ok) detail::raise_config_error(std::move(ok).error());
    return c;
  }
  static constexpr std::uint64_t epoch_of(std::uint64_t w) noexcept { return w >> 48; }
  static constexpr std::uint64_t requests_of(std::uint64_t w) noexcept {
    return (w >> kCountBits) & kCountMax;
  }
  static constexpr std::uint64_t accepts_of(std::uint64_t w) noexcept { return w & kCountMax; }
  static constexpr std::uint64_t pack(std::uint64_t e, std::uint64_t r, std::uint64_t a) noexcept {
    return (e << 48) | (r << kCountBits) | a;
  }

  std::uint64_t bucket(Ticks now) const noexcept {
    return static_cast<std::uint64_t>(std::max<Ticks>(0, now) / width_);
  }

  void add(Ticks now, std::uint64_t req, std::uint64_t acc) noexcept {
    const std::uint64_t b = bucket(now);
    const std::uint64_t e = b & kEpochMask;
    auto& slot = slots_[b % config_.buckets];
    std::uint64_t w = slot.load(std::memory_order_relaxed);
    for (;;) {
      // A slot already holding a later bucket than ours (our clock reading lagged
      // another thread's) is counted into, not reset.
      const std::uint64_t we = epoch_of(w);
      const std::uint64_t ahead = (we - e) & kEpochMask;
      const bool keep = w != 0 && ahead <= config_.buckets;
      const std::uint64_t nw = keep ? pack(we, std::min(kCountMax, requests_of(w) + req),
                                           std::min(kCountMax, accepts_of(w) + acc))
                                    : pack(e, req, acc);
      if (slot.compare_exchange_weak(w, nw, std::memory_order_relaxed)) return;
    }
  }

  struct Totals {
    std::uint64_t requests;
    std::uint64_t accepts;
  };
  Totals totals(Ticks now) const noexcept {
    const std::uint64_t e = bucket(now) & kEpochMask;
    Totals t{0, 0};
    for (std::uint32_t i = 0; i < config_.buckets; ++i) {
      const std::uint64_t w = slots_[i].load(std::memory_order_relaxed);
      if (w == 0) continue;
      if (((e - epoch_of(w)) & kEpochMask) >= config_.buckets) continue;  // stale (or newer)
      t.requests += requests_of(w);
      t.accepts += accepts_of(w);
    }
    return t;
  }

  double formula(std::uint64_t req, std::uint64_t acc) const noexcept {
    const double r = static_cast<double>(req);
    const double p = (r - config_.k * static_cast<double>(acc)) / (r + 1.0);
    return p > 0.0 ? p : 0.0;
  }
  double probability(Ticks now) const noexcept {
    const auto [req, acc] = totals(now);
    return formula(req, acc);
  }

  // Uniform in [0, 1).
  double draw() noexcept {
    std::uint64_t bits;
    if (config_.seed) {
      SplitMix64 g(rng_.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed));
      bits = g();
    } else {
      bits = thread_random();
    }
    return static_cast<double>(bits >> 11) * 0x1.0p-53;
  }

  ThrottleConfig config_;
  [[no_unique_address]] detail::ClockRef<C> clock_;
  Ticks width_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> slots_;
  std::atomic<std::uint64_t> rng_;
  std::atomic<std::uint64_t> throttled_{0};
};

using Throttle = BasicThrottle<SteadyClock>;

// The default "accepted by the dependency" classifier of the throttle stage: a call
// that failed is accepted unless it shows overload — it timed out, or its error says
// so: `bool overloaded() const` if the error has one, else a retry-after hint
// (ErrorTraits<E>::retry_after: an HTTP 429/503 Retry-After, a gRPC pushback). An
// ignored error (a 4xx) was accepted: the dependency answered it.
struct ThrottleAccepts {
  template <class E>
  bool operator()(const Failure<E>& f) const {
    if (f.timed_out || !f.error) return false;
    const E& e = *f.error;
    if constexpr (requires {
                    { e.overloaded() } -> std::convertible_to<bool>;
                  }) {
      return !e.overloaded();
    } else {
      return !ErrorTraits<E>::retry_after(e).has_value();
    }
  }
};

}  // namespace bulwark

#endif  // BULWARK_THROTTLE_H_
