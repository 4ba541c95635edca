// bulwark/backoff.h — how long to wait before each retry, as a value.
//
// The schedule is separate from the loop that sleeps (as gRPC's backoff.h is): a
// Backoff answers "how long before retry n?" as a pure function of n, the previous
// delay and 64 random bits, so tests check exact sequences, the simulator asks it step
// by step, and the random source is injected.
//
//   auto b = bulwark::Backoff::exponential(100ms, 2.0, 10s).with_jitter(bulwark::Jitter::full);
//   b.base_delay(1);                       // 100 ms, then 200, 400, ... capped at 10 s
//   b.delay(3, previous, random_bits());   // uniform in [0, 400 ms]
//
// Arithmetic never overflows, never goes negative and never collapses to zero at huge
// attempt counts: exponential growth is computed in floating point and clamped to the
// cap, so base_delay(4'000'000'000) is the cap.
//
// Jitter (names from the AWS Architecture Blog's "Exponential Backoff And Jitter"):
//   none          d
//   full          uniform in [0, d]
//   equal         d/2 + uniform in [0, d/2]
//   decorrelated  min(cap, uniform in [initial, 3 * previous]); `previous` starts at
//                 `initial`. It ignores the schedule's growth and uses only its first
//                 delay and its cap.
//
// Cost: base_delay() and delay() are a few floating-point operations; no allocation
// (a custom schedule calls its std::function). A Backoff is immutable once built;
// concurrent calls are safe.

#ifndef BULWARK_BACKOFF_H_
#define BULWARK_BACKOFF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/expected.h"

namespace bulwark {

enum class Jitter : std::uint8_t { none, full, equal, decorrelated };

constexpr std::string_view to_string(Jitter j) noexcept {
  switch (j) {
    case Jitter::none:
      return "none";
    case Jitter::full:
      return "full";
    case Jitter::equal:
      return "equal";
    case Jitter::decorrelated:
      return "decorrelated";
  }
  return "unknown";
}

// A source of uniformly distributed 64-bit values. Called only when a jittered delay
// is computed (never on a call that succeeds first time). If one source is shared by
// threads, it must be thread-safe; the default (a null RandomSource) is a per-thread
// SplitMix64 generator.
using RandomSource = std::function<std::uint64_t()>;

// A seeded, deterministic generator for tests and simulations (SplitMix64). Not
// thread-safe: give each thread its own, or wrap it.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  constexpr std::uint64_t operator()() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

// 64 bits from the calling thread's own generator, seeded once per thread.
std::uint64_t thread_random() noexcept;

// A uniformly distributed duration in [lo, hi] (lo <= hi, both >= 0) from 64 random bits.
Nanos uniform_between(Nanos lo, Nanos hi, std::uint64_t random) noexcept;

class Backoff {
 public:
  enum class Kind : std::uint8_t { constant, exponential, custom };

  // d before every retry. d >= 0 (zero retries at once).
  static Backoff constant(Nanos d);
  // initial * multiplier^(n-1) before retry n, at most `max`. initial > 0,
  // multiplier >= 1 (finite), max >= initial.
  static Backoff exponential(Nanos initial, double multiplier, Nanos max);
  // fn(n) before retry n, clamped to [0, max]. fn must be thread-safe if the Backoff
  // is shared. `max` is also the cap of decorrelated jitter.
  static Backoff custom(std::function<Nanos(std::uint32_t retry)> fn, Nanos max = Nanos::max());

  // A copy with the given jitter.
  Backoff with_jitter(Jitter j) const {
    Backoff b = *this;
    b.jitter_ = j;
    return b;
  }

  // The delay before retry `n` (n >= 1; 0 is treated as 1) without jitter.
  Nanos base_delay(std::uint32_t n) const noexcept;
  // The delay before retry `n` with jitter applied. `previous` is the delay used
  // before the previous retry (decorrelated jitter grows from it; ignore it otherwise,
  // zero for the first retry) and `random` 64 uniformly random bits.
  Nanos delay(std::uint32_t n, Nanos previous, std::uint64_t random) const noexcept;

  Kind kind() const noexcept { return kind_; }
  Jitter jitter() const noexcept { return jitter_; }
  Nanos initial() const noexcept { return initial_; }
  double multiplier() const noexcept { return multiplier_; }
  Nanos max() const noexcept { return max_; }

  // Checks the parameters; the error names the field as `<prefix>.initial` etc.
  Expected<void, ConfigError> validate(const std::string& component,
                                       const std::string& prefix) const;

 private:
  Backoff(Kind kind, Nanos initial, double multiplier, Nanos max) noexcept
      : kind_(kind), initial_(initial), multiplier_(multiplier), max_(max) {}

  Kind kind_;
  Jitter jitter_ = Jitter::none;
  Nanos initial_;
  double multiplier_;
  Nanos max_;
  std::function<Nanos(std::uint32_t)> fn_;
};

}  // namespace bulwark

#endif  // BULWARK_BACKOFF_H_
