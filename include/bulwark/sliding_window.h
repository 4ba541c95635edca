// bulwark/sliding_window.h — what a breaker remembers of recent calls.
//
// A breaker that trips on a failure *rate* needs a window of recent outcomes. The
// window is the breaker's second template parameter, so a breaker that only counts
// consecutive failures pays nothing for it:
//
//   bulwark::CircuitBreaker              // NoWindow: consecutive failures only, 64 bytes
//   bulwark::CountWindowBreaker          // the last N calls (window.size)
//   bulwark::TimeWindowBreaker           // the last T (window.length) in B buckets, 256 bytes
//
// Both windows count calls, failures, slow successes and slow failures, and can track
// the calls still in flight that are already slower than slow_call_duration, so a
// dependency that stops answering trips the breaker before any call completes.
//
// Everything here is lock-free and allocation-free after construction (the count
// window allocates its ring once, when the breaker is built). A time window rotates
// lazily on the request path: the first call in a new bucket starts it; an idle gap
// longer than the window costs O(buckets), never O(gap); a clock stepping backwards
// is treated as no time passing. Outcomes carry the breaker's generation, so after a
// reset or a close, older outcomes count nowhere and nothing has to be cleared.
//
// Thread-safety: used only through the breaker; every member is thread-safe.

#ifndef BULWARK_SLIDING_WINDOW_H_
#define BULWARK_SLIDING_WINDOW_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "bulwark/breaker_config.h"
#include "bulwark/clock.h"
#include "bulwark/detail/bitfield.h"
#include "bulwark/detail/schedule_point.h"

namespace bulwark {

// What a window holds for the current generation, as seen at one moment.
struct WindowCounts {
  std::uint64_t calls = 0;           // completed calls that counted (not ignored)
  std::uint64_t failures = 0;        // of which failures (slow or not)
  std::uint64_t slow_successes = 0;  // successes slower than slow_call_duration
  std::uint64_t slow_failures = 0;   // failures slower than slow_call_duration
  std::uint64_t in_flight_slow = 0;  // calls in flight for longer than slow_call_duration
  std::uint64_t slow() const noexcept { return slow_successes + slow_failures; }
};

namespace detail {

// How a completed call lands in a window. 0 is "no call".
enum class Sample : std::uint8_t { success = 1, failure = 2, slow_success = 3, slow_failure = 4 };

constexpr Sample make_sample(bool failure, bool slow) noexcept {
  return failure ? (slow ? Sample::slow_failure : Sample::failure)
                 : (slow ? Sample::slow_success : Sample::success);
}

// Generations are the breaker's 19-bit counters. Window words keep their low bits only:
// the breaker's publisher writes every window word at every transition (begin_phase),
// so a word's generation is never more than a few transitions behind the breaker's and
// a shortened one cannot wrap around to look current.
constexpr std::uint32_t kGenBits = 19;
constexpr std::uint32_t kGenMask = (1u << kGenBits) - 1;
// True if `a` is after `b`, both the low `bits` of a generation (ahead by less than half).
constexpr bool gen_after(std::uint32_t a, std::uint32_t b, unsigned bits) noexcept {
  const std::uint32_t mask = (1u << bits) - 1;
  const std::uint32_t d = (a - b) & mask;
  return d != 0 && d < (1u << (bits - 1));
}

// What phase of the breaker a transition starts, as the window sees it.
enum class Phase : std::uint8_t {
  recording,        // CLOSED, METRICS_ONLY: outcomes go into the window
  probing,          // HALF_OPEN: a new round; the probes' tally starts empty
  probing_carried,  // HALF_OPEN again (a stuck round restarted): the tally carries over
  idle,             // OPEN, FORCED_OPEN, DISABLED: nothing is recorded
};

// The window's head word. The generation (its low 12 bits) says which phase of the
// breaker the word belongs to; the lap is common to every reading and only ever moves
// forward. Two readings, each a checked layout:
//   recording (CLOSED, METRICS_ONLY): the newest bucket (time) or call count (count),
//     and whether a rate rule is "armed" (over its threshold, waiting for the volume);
//   probing (HALF_OPEN; also the parked word of idle phases): that round's ramp stage
//     and probe tally.
// The lap changes whenever a time window starts afresh (a new recording phase, or a
// gap of a whole window or more): bucket tags are made of it, so a bucket left from an
// earlier lap never passes for a current one, however far the head jumped. The start of
// a lap rewrites every bucket, so this holds after the 7-bit lap wraps around too.
namespace head {
using Gen = Field<52, 12, std::uint32_t>;
using Lap = Field<45, 7, std::uint32_t>;
using Armed = Field<44, 1, bool>;
using Pos = Field<0, 44>;
using Stage = Field<42, 3, std::uint32_t>;
using Completed = Field<28, 14, std::uint32_t>;
using Failures = Field<14, 14, std::uint32_t>;
using Slow = Field<0, 14, std::uint32_t>;
using Recording = Layout<Gen, Lap, Armed, Pos>;
using Probing = Layout<Gen, Lap, Stage, Completed, Failures, Slow>;
inline constexpr unsigned kGenBits = Gen::width;
}  // namespace head

// Probe outcomes of one stage of a half-open round.
struct ProbeTally {
  std::uint32_t completed = 0, failures = 0, slow = 0;
  bool stale = false;  // the round or its stage is over: this outcome counts nowhere
};

class HeadWord {
 public:
  constexpr HeadWord() noexcept = default;
  constexpr explicit HeadWord(std::uint64_t raw) noexcept : raw_(raw) {}
  static constexpr HeadWord recording(std::uint32_t gen, std::uint32_t lap, bool armed,
                                      std::uint64_t pos) noexcept {
    return HeadWord(head::Recording::make(head::Gen::value(gen), head::Lap::value(lap),
                                          head::Armed::value(armed), head::Pos::value(pos)));
  }
  static constexpr HeadWord probing(std::uint32_t gen, std::uint32_t lap, std::uint32_t stage,
                                    const ProbeTally& t) noexcept {
    std::uint64_t w = head::Probing::make(head::Gen::value(gen), head::Lap::value(lap),
                                          head::Stage::value(stage));
    w = head::Completed::set_saturated(w, t.completed);
    w = head::Failures::set_saturated(w, t.failures);
    return HeadWord(head::Slow::set_saturated(w, t.slow));
  }
  constexpr std::uint64_t raw() const noexcept { return raw_; }
  // True if the word belongs to the breaker's generation `gen`.
  constexpr bool of(std::uint32_t gen) const noexcept {
    return head::Gen::get(raw_) == (gen & head::Gen::max);
  }
  // True if the word belongs to a generation after `gen`.
  constexpr bool after(std::uint32_t gen) const noexcept {
    return gen_after(head::Gen::get(raw_), gen & head::Gen::max, head::kGenBits);
  }
  constexpr std::uint32_t lap() const noexcept { return head::Lap::get(raw_); }
  // Recording reading.
  constexpr bool armed() const noexcept { return head::Armed::get(raw_); }
  constexpr std::uint64_t pos() const noexcept { return head::Pos::get(raw_); }
  // Probing reading.
  constexpr std::uint32_t stage() const noexcept { return head::Stage::get(raw_); }
  constexpr ProbeTally tally() const noexcept {
    return {head::Completed::get(raw_), head::Failures::get(raw_), head::Slow::get(raw_)};
  }

 private:
  std::uint64_t raw_ = 0;
};

// Shared by both windows: the head word, in both of its roles.
class HeadBase {
 public:
  // Sets or clears the "armed" flag of recording generation `gen`.
  void set_armed(std::uint32_t gen, bool armed) noexcept {
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    for (;;) {
      const HeadWord h(raw);
      if (!h.of(gen) || h.armed() == armed) return;
      const HeadWord next = HeadWord::recording(gen, h.lap(), armed, h.pos());
      BULWARK_SCHEDULE_POINT("head.set_armed: cas");
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        return;
    }
  }

  // Adds one probe outcome to stage `stage` of round `gen`. Returns that stage's tally
  // including it, or a stale tally if the round or the stage is already over. The
  // first outcome of a later stage starts that stage's tally afresh.
  ProbeTally probe(std::uint32_t gen, std::uint32_t stage, bool failure, bool slow) noexcept {
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    for (;;) {
      const HeadWord h(raw);
      ProbeTally t;
      if (h.of(gen)) {
        if (h.stage() > stage) return {.stale = true};
        if (h.stage() == stage) t = h.tally();
      } else if (h.after(gen)) {
        return {.stale = true};
      }
      t.completed += 1, t.failures += failure ? 1 : 0, t.slow += slow ? 1 : 0;
      const HeadWord next = HeadWord::probing(gen, h.lap(), stage, t);
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return t;
      }
    }
  }

  ProbeTally probe_tally(std::uint32_t gen) const noexcept {
    const HeadWord h(head_.load(std::memory_order_acquire));
    if (!h.of(gen)) return {};
    return h.tally();
  }

 protected:
  // Installs a probing (or parked) word for `gen`, unless the word already is of `gen`
  // (an early probe of the round put it there). `carry`: keep the tally and stage of
  // the previous generation's round.
  void begin_probing(std::uint32_t gen, bool carry) noexcept {
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    for (;;) {
      const HeadWord h(raw);
      if (h.of(gen) || h.after(gen)) return;
      const bool keep = carry && h.of(gen - 1);
      const HeadWord next =
          HeadWord::probing(gen, h.lap(), keep ? h.stage() : 0, keep ? h.tally() : ProbeTally{});
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        return;
    }
  }

  std::atomic<std::uint64_t> head_{0};
};

// What recording an outcome did: the head word after it, and whether older outcomes
// left the window on the way (a time window rotated), which can raise a rate even
// when the new outcome is a success.
struct Recorded {
  HeadWord head;
  bool dropped = false;
};

// Calls in flight, by the epoch they were admitted in. An epoch is the smallest power
// of two nanoseconds at least slow_call_duration long (a shift, not a division, on
// the call path). Two epoch slots plus an "ancient" count: a slot is recycled by the
// first admission two epochs later, and the calls it still held — admitted at least
// one full epoch ago, so slower than slow_call_duration — move to the ancient count.
// Counts are per generation: calls admitted before a reset or a close don't count
// after it.
//   slot:    [gen 12 | epoch 28 | count 24]
//   ancient: [gen 12 | checked 20 | count 32, two's complement]
// The in-flight calls counted slow at `now` are those of the epochs that ended by
// `now - slow`, so that set grows only when the *period* epoch_of(now - slow) moves on
// (one more epoch's calls turn slow) — or when a late thread counts a call in an epoch
// already slow. `checked` holds the last period whose rates were judged (its low 19
// bits, and a top bit so that 0 means none), so that a fast success judges the rates
// only once per period instead of at every completion. (A late thread's call is judged
// by the next failure, slow call or new period: at most one epoch later.)
// A slot keeps the low 28 bits of its epoch (at least 3 days of 1 ms epochs). A slot
// up to 1024 epochs *ahead* of a thread's reading of the clock is a newer epoch if a
// fresh reading confirms it (this thread is late) or if it still holds calls in flight
// (the clock stepped back, which is no time passing): the thread's call counts in it,
// and its calls are not slow yet. An empty slot ahead of a fresh reading is left from
// an earlier wrap of those bits after a long idle gap, and is recycled. (One that still
// holds calls — permits leaked ~2^28 epochs ago — reads as current until the clock
// passes it, then is recycled like any other.)
class InFlight {
  using SGen = Field<52, 12, std::uint32_t>;
  using SEpoch = Field<24, 28>;
  using SCount = Field<0, 24>;
  using Slot = Layout<SGen, SEpoch, SCount>;
  using AGen = Field<52, 12, std::uint32_t>;
  using AChecked = Field<32, 20>;
  using ACount = Field<0, 32>;
  using Ancient = Layout<AGen, AChecked, ACount>;
  static constexpr unsigned kGenBits = SGen::width;
  static constexpr std::uint64_t kEpochMask = SEpoch::max;

 public:
  struct Admission {
    std::uint64_t epoch;  // the epoch the call was counted in (>= the one asked for)
    bool new_epoch;       // this admission started it: time to re-evaluate slowness
  };

  // Counts a call admitted at `epoch`. A thread that arrives late (its clock read is
  // older than an epoch another thread already started), or whose clock stepped back,
  // is counted in the newer one. `current()` reads the clock again, as an epoch; it
  // runs only when an empty slot looks ahead of `epoch`.
  template <class Current>
  Admission admit(std::uint32_t gen, std::uint64_t epoch, Current&& current) noexcept {
    for (;;) {
      auto& slot = slots_[epoch & 1];
      std::uint64_t raw = slot.load(std::memory_order_acquire);
      if (mine(raw, gen) && SEpoch::get(raw) == (epoch & kEpochMask)) {  // the common case
        if (SCount::get(raw) == SCount::max) return {epoch, false};      // saturated
        if (slot.compare_exchange_weak(raw, raw + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
          return {epoch, false};
        }
        continue;
      }
      // A late thread (its clock read is older than an epoch another thread already
      // started, or its clock stepped back) is counted in the newer epoch.
      const std::uint64_t other = slots_[(epoch + 1) & 1].load(std::memory_order_acquire);
      if (const std::uint64_t ahead = newer_epoch(other, gen, epoch, current); ahead != 0) {
        epoch = ahead;
        continue;
      }
      if (const std::uint64_t ahead = newer_epoch(raw, gen, epoch, current); ahead != 0) {
        epoch = ahead;
        continue;
      }
      // The slot holds an older epoch (or generation): recycle it. Its calls were
      // admitted at least one epoch before ours began, so they are slow already.
      const std::uint64_t moved = mine(raw, gen) ? SCount::get(raw) : 0;
      if (slot.compare_exchange_weak(raw, make_slot(gen, epoch, 1), std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        if (moved != 0) add_ancient(gen, static_cast<std::int64_t>(moved));
        return {epoch, true};
      }
    }
  }

  // Uncounts a call admitted at `epoch` in generation `gen`.
  void complete(std::uint32_t gen, std::uint64_t epoch) noexcept {
    auto& slot = slots_[epoch & 1];
    std::uint64_t raw = slot.load(std::memory_order_acquire);
    while (mine(raw, gen) && SEpoch::get(raw) == (epoch & kEpochMask) && SCount::get(raw) != 0) {
      if (slot.compare_exchange_weak(raw, raw - 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        return;
    }
    add_ancient(gen, -1);  // its slot was recycled: it was counted in the ancient count
  }

  // Parks every word at generation `gen`, counts empty, unless it already is of `gen`
  // (an early admission of the new phase). Called by the breaker at each transition.
  void begin(std::uint32_t gen) noexcept {
    for (auto& slot : slots_) {
      std::uint64_t raw = slot.load(std::memory_order_acquire);
      while (!mine(raw, gen) && !gen_after(SGen::get(raw), gen & SGen::max, kGenBits)) {
        if (slot.compare_exchange_weak(raw, make_slot(gen, 0, 0), std::memory_order_acq_rel,
                                       std::memory_order_acquire))
          break;
      }
    }
    std::uint64_t raw = ancient_.load(std::memory_order_acquire);
    while (AGen::get(raw) != (gen & AGen::max) &&
           !gen_after(AGen::get(raw), gen & AGen::max, kGenBits)) {
      if (ancient_.compare_exchange_weak(raw, Ancient::make(AGen::value(gen)),
                                         std::memory_order_acq_rel, std::memory_order_acquire))
        break;
    }
  }

  // The epoch a time falls in, for epochs of 2^shift ns.
  static std::uint64_t epoch_of(Ticks t, unsigned shift) noexcept {
    return static_cast<std::uint64_t>(std::max<Ticks>(0, t)) >> shift;
  }
  // The start of an epoch.
  static Ticks epoch_start(std::uint64_t epoch, unsigned shift) noexcept {
    return epoch >= (static_cast<std::uint64_t>(kTicksMax) >> shift)
               ? kTicksMax
               : static_cast<Ticks>(epoch << shift);
  }

  // The period of `now`: slow_calls() can only grow when it moves on.
  static std::uint64_t period_of(Ticks now, Ticks slow, unsigned shift) noexcept {
    return epoch_of(saturating_sub(now, slow), shift);
  }
  // True if the rates of generation `gen` were judged in `period` (see mark_checked).
  bool checked(std::uint32_t gen, std::uint64_t period) const noexcept {
    const std::uint64_t a = ancient_.load(std::memory_order_acquire);
    return AGen::get(a) == (gen & AGen::max) && AChecked::get(a) == checked_tag(period);
  }
  // Notes that the rates of generation `gen` were judged in `period`. A lost race only
  // makes a later success judge again.
  void mark_checked(std::uint32_t gen, std::uint64_t period) noexcept {
    update_ancient(gen,
                   [tag = checked_tag(period)](std::uint64_t a) { return AChecked::set(a, tag); });
  }

  // Calls of generation `gen` admitted before `now - slow` and still in flight.
  std::uint64_t slow_calls(std::uint32_t gen, Ticks now, Ticks slow,
                           unsigned shift) const noexcept {
    std::int64_t n = 0;
    const Ticks cutoff = saturating_sub(now, slow);
    const std::uint64_t epoch_now = epoch_of(now, shift);
    for (const auto& s : slots_) {
      const std::uint64_t raw = s.load(std::memory_order_acquire);
      if (!mine(raw, gen) || SCount::get(raw) == 0) continue;
      const std::uint64_t lo = SEpoch::get(raw);
      const std::uint64_t d = (lo - epoch_now) & kEpochMask;
      // Ahead of our reading, with calls in flight: calls admitted after we read the
      // clock, or before it stepped back (no time passing). Not slow.
      if (d != 0 && d <= kAheadMax) continue;
      // Every call of the slot's epoch began before the cutoff only if the epoch ended by then.
      const std::uint64_t e = unwrap_epoch(lo, epoch_now);
      if (epoch_start(e + 1, shift) <= cutoff) n += static_cast<std::int64_t>(SCount::get(raw));
    }
    const std::uint64_t a = ancient_.load(std::memory_order_acquire);
    if (AGen::get(a) == (gen & AGen::max)) n += ancient_count(a);
    return n > 0 ? static_cast<std::uint64_t>(n) : 0;
  }

 private:
  // How far ahead (in epochs) a slot may be of a thread's reading and still be taken
  // for a newer epoch than the thread's.
  static constexpr std::uint64_t kAheadMax = 1024;

  static constexpr bool mine(std::uint64_t raw, std::uint32_t gen) noexcept {
    return SGen::get(raw) == (gen & SGen::max);
  }
  static constexpr std::uint64_t checked_tag(std::uint64_t period) noexcept {
    return (AChecked::max >> 1) + 1 + (period & (AChecked::max >> 1));
  }
  static constexpr std::uint64_t make_slot(std::uint32_t gen, std::uint64_t epoch,
                                           std::uint64_t count) noexcept {
    return Slot::make(SGen::value(gen), SEpoch::value(epoch), SCount::value(count));
  }
  // If slot word `raw` of generation `gen` holds an epoch ahead of `epoch` (by at most
  // kAheadMax) that is real — it holds calls in flight, or a fresh clock reading
  // confirms it has begun — that epoch; else 0.
  template <class Current>
  static std::uint64_t newer_epoch(std::uint64_t raw, std::uint32_t gen, std::uint64_t epoch,
                                   Current& current) noexcept {
    if (!mine(raw, gen)) return 0;
    const std::uint64_t d = (SEpoch::get(raw) - epoch) & kEpochMask;
    if (d == 0 || d > kAheadMax) return 0;
    return SCount::get(raw) != 0 || current() >= epoch + d ? epoch + d : 0;
  }
  // The full epoch whose low bits are `lo`, at or before `now_epoch`.
  static constexpr std::uint64_t unwrap_epoch(std::uint64_t lo, std::uint64_t now_epoch) noexcept {
    const std::uint64_t back = (now_epoch - lo) & kEpochMask;
    return back > now_epoch ? 0 : now_epoch - back;
  }
  static constexpr std::int64_t ancient_count(std::uint64_t raw) noexcept {
    const std::uint64_t c = ACount::get(raw);
    constexpr std::uint64_t kSign = std::uint64_t{1} << (ACount::width - 1);
    return (c & kSign) ? static_cast<std::int64_t>(c) - static_cast<std::int64_t>(ACount::max) - 1
                       : static_cast<std::int64_t>(c);
  }

  void add_ancient(std::uint32_t gen, std::int64_t delta) noexcept {
    update_ancient(gen, [delta](std::uint64_t a) {
      return ACount::set(a, static_cast<std::uint64_t>(ancient_count(a) + delta) & ACount::max);
    });
  }

  // Replaces the ancient word of generation `gen` by next(word): an earlier
  // generation's word (whose count no longer counts) is first taken over as an empty one
  // of `gen`; a later generation's is left alone (ours is forgotten).
  template <class Next>
  void update_ancient(std::uint32_t gen, Next next) noexcept {
    std::uint64_t raw = ancient_.load(std::memory_order_acquire);
    for (;;) {
      const std::uint32_t g = AGen::get(raw);
      if (gen_after(g, gen & AGen::max, kGenBits)) return;
      const std::uint64_t want =
          next(g == (gen & AGen::max) ? raw : Ancient::make(AGen::value(gen)));
      if (want == raw) return;
      if (ancient_.compare_exchange_weak(raw, want, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
        return;
    }
  }

  std::array<std::atomic<std::uint64_t>, 2> slots_{};
  std::atomic<std::uint64_t> ancient_{0};
};

}  // namespace detail

// Parameters a window reads from its breaker's policy.
struct WindowParams {
  std::uint32_t size = 0;        // count window: calls
  std::uint32_t buckets = 0;     // time window: bucket count
  Ticks bucket_width = 0;        // time window: window.length / buckets
  Ticks slow_call_duration = 0;  // 0: slowness is not judged
  bool track_in_flight = false;  // count calls in flight longer than slow_call_duration
  unsigned epoch_shift = 0;      // in-flight epochs last 2^epoch_shift >= slow_call_duration ns
};

// No window: the breaker only counts consecutive failures. Costs nothing.
struct NoWindow {
  static constexpr WindowKind kind = WindowKind::none;
  using config_type = BreakerConfig;
  constexpr explicit NoWindow(const WindowParams&) noexcept {}
};

// The last `window.size` calls, exactly, with running totals: recording a call and
// reading the window cost the same whatever the window's size.
//
// A ring of two bytes per call, allocated once with the breaker: each entry holds its
// call's outcome, its lap (position / size, low 3 bits) and its generation (low 10
// bits). Recording claims a position with one CAS on the cursor (the head word), then
// replaces the ring entry with one CAS — evicting the entry of the same generation it
// finds there, one or more laps older — and applies the difference to two totals words
// ([gen 16 | calls 24 | failures 24] and [gen 16 | slow successes 24 | slow failures
// 24], the second only for slow calls). A call whose entry was already overwritten by a
// newer lap (its thread was delayed by a whole window of calls) is out of the window by
// then and changes nothing. The totals are signed sums of these differences, which add
// up whatever order they land in: a delayed call's entry can be evicted before its own
// outcome reaches the totals, and the eviction's subtraction then lands first. The
// totals are thus always the sum of the entries of the current generation once the
// calls being recorded are done; reading them is two loads (a reading taken meanwhile is
// clamped to 0 <= failures, slow calls <= calls).
class CountWindow : public detail::HeadBase {
  using EGen = detail::Field<6, 10, std::uint32_t>;
  using ELap = detail::Field<3, 3, std::uint32_t>;
  using ESample = detail::Field<0, 3, std::uint32_t>;
  using Entry = detail::Layout<EGen, ELap, ESample>;
  using TGen = detail::Field<48, 16, std::uint32_t>;
  using THi = detail::Field<24, 24>;  // calls / slow successes, two's complement
  using TLo = detail::Field<0, 24>;   // failures / slow failures, two's complement
  using Totals = detail::Layout<TGen, THi, TLo>;
  static_assert(THi::width == TLo::width);

 public:
  static constexpr WindowKind kind = WindowKind::count;
  using config_type = CountWindowConfig;

  explicit CountWindow(const WindowParams& p)
      : size_(p.size), ring_(new std::atomic<std::uint16_t>[p.size]) {
    for (std::uint32_t i = 0; i < size_; ++i) ring_[i].store(0, std::memory_order_relaxed);
  }

  // Records a completed call of generation `gen`. A full count window drops one
  // outcome per call, but replacing it can only lower the rate when the new one is a
  // success, so `dropped` stays false.
  detail::Recorded record(const WindowParams&, std::uint32_t gen, Ticks,
                          detail::Sample s) noexcept {
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    for (;;) {
      const detail::HeadWord h(raw);
      std::uint64_t n = 0;
      bool armed = false;
      if (h.of(gen)) {
        n = h.pos(), armed = h.armed();
      } else if (h.after(gen)) {
        return {h};  // stale: a later phase owns the window
      }
      const std::uint32_t lap = h.of(gen) ? h.lap() : h.lap() + 1;
      const detail::HeadWord next = detail::HeadWord::recording(gen, lap, armed, n + 1);
      BULWARK_SCHEDULE_POINT("count.record: claim a position");
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        if (!h.of(gen)) reset_totals(gen);  // the first call of the phase
        place(gen, n, s);
        return {next};
      }
    }
  }

  WindowCounts counts(const WindowParams&, std::uint32_t gen, Ticks) const noexcept {
    WindowCounts c;
    // The slow total first: a call adds to `calls_` before `slow_`, and within one
    // generation the calls total never shrinks (an eviction comes with an addition),
    // so the pair read in this order never shows more slow calls than calls.
    // (While a delayed call's addition is still to come after its eviction, a total can
    // be one off: each is clamped to what the others allow.)
    const std::uint64_t b = slow_.load(std::memory_order_acquire);
    BULWARK_SCHEDULE_POINT("count.counts: between the totals");
    const std::uint64_t a = calls_.load(std::memory_order_acquire);
    if (TGen::get(a) != (gen & TGen::max)) return c;
    const std::int64_t calls = std::max<std::int64_t>(0, total(THi::get(a)));
    c.calls = static_cast<std::uint64_t>(calls);
    c.failures = static_cast<std::uint64_t>(std::clamp<std::int64_t>(total(TLo::get(a)), 0, calls));
    if (TGen::get(b) == (gen & TGen::max)) {
      const std::int64_t slow_s = std::clamp<std::int64_t>(total(THi::get(b)), 0, calls);
      c.slow_successes = static_cast<std::uint64_t>(slow_s);
      c.slow_failures = static_cast<std::uint64_t>(
          std::clamp<std::int64_t>(total(TLo::get(b)), 0, calls - slow_s));
    }
    return c;
  }

  // Starts the window of a new phase of the breaker (see detail::Phase).
  void begin_phase(const WindowParams&, std::uint32_t gen, detail::Phase phase, Ticks) noexcept {
    in_flight_.begin(gen);
    if (phase != detail::Phase::recording)
      return begin_probing(gen, phase == detail::Phase::probing_carried);
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    for (;;) {
      const detail::HeadWord h(raw);
      if (h.of(gen) || h.after(gen)) return;  // an early call of the phase started it
      const detail::HeadWord next = detail::HeadWord::recording(gen, h.lap() + 1, false, 0);
      BULWARK_SCHEDULE_POINT("count.begin_phase: cas");
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        reset_totals(gen);
        return;
      }
    }
  }

  detail::InFlight& in_flight() noexcept { return in_flight_; }
  const detail::InFlight& in_flight() const noexcept { return in_flight_; }
  // Bytes allocated besides sizeof.
  std::uint64_t footprint() const noexcept { return std::uint64_t{size_} * sizeof(std::uint16_t); }

 private:
  friend struct WindowAccess;
  static constexpr std::uint32_t kEntryGenBits = EGen::width;

  // Replaces the entry at position `n` of generation `gen` with outcome `s`.
  void place(std::uint32_t gen, std::uint64_t n, detail::Sample s) noexcept {
    auto& slot = ring_[n % size_];
    const std::uint32_t lap = static_cast<std::uint32_t>(n / size_) & ELap::max;
    const std::uint32_t g = gen & EGen::max;
    const auto mine = static_cast<std::uint16_t>(Entry::make(
        EGen::value(g), ELap::value(lap), ESample::value(static_cast<std::uint32_t>(s))));
    std::uint16_t cur = slot.load(std::memory_order_acquire);
    for (;;) {
      BULWARK_SCHEDULE_POINT("count.place: entry read");
      const std::uint32_t cur_sample = ESample::get(cur);
      const std::uint32_t cur_gen = EGen::get(cur);
      detail::Sample evicted{};
      if (cur_sample != 0 && cur_gen == g && n >= size_) {
        const std::uint32_t older = (lap - ELap::get(cur)) & ELap::max;
        if (older == 0 || older > ELap::max / 2) return;  // overwritten by a newer lap already
        evicted = static_cast<detail::Sample>(cur_sample);
      } else if (cur_sample != 0 && cur_gen == g) {
        // The first lap: an entry of this generation here is a newer lap's (a whole
        // window of calls was claimed after ours, and one of them placed its entry
        // before this thread got here), or one left by a phase 1024 phases ago. Either
        // way, once the head is past n + size our call is out of the window.
        const detail::HeadWord h(head_.load(std::memory_order_acquire));
        if (!h.of(gen) || h.pos() > n + size_) return;
      } else if (cur_sample != 0 && detail::gen_after(cur_gen, g, kEntryGenBits) &&
                 !detail::HeadWord(head_.load(std::memory_order_acquire)).of(gen)) {
        // A later phase writes here: this call is stale. Entries are not rewritten at
        // transitions, so one left many phases ago can look "after" ours in 10 bits; it
        // only is if the head (rewritten at every transition) has moved on from ours.
        return;
      }
      BULWARK_SCHEDULE_POINT("count.place: replace the entry");
      if (slot.compare_exchange_weak(cur, mine, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        apply(gen, s, evicted);
        return;
      }
    }
  }

  static void delta(detail::Sample s, int sign, std::int64_t& calls, std::int64_t& failures,
                    std::int64_t& slow_s, std::int64_t& slow_f) noexcept {
    switch (s) {
      case detail::Sample::success:
        calls += sign;
        break;
      case detail::Sample::failure:
        calls += sign, failures += sign;
        break;
      case detail::Sample::slow_success:
        calls += sign, slow_s += sign;
        break;
      case detail::Sample::slow_failure:
        calls += sign, failures += sign, slow_f += sign;
        break;
    }
  }

  // Adds `added` and removes `evicted` (0: none) from the totals of generation `gen`.
  void apply(std::uint32_t gen, detail::Sample added, detail::Sample evicted) noexcept {
    std::int64_t calls = 0, failures = 0, slow_s = 0, slow_f = 0;
    delta(added, 1, calls, failures, slow_s, slow_f);
    if (static_cast<int>(evicted) != 0) delta(evicted, -1, calls, failures, slow_s, slow_f);
    if (calls != 0 || failures != 0) add(calls_, gen, calls, failures);
    BULWARK_SCHEDULE_POINT("count.apply: between the totals");
    if (slow_s != 0 || slow_f != 0) add(slow_, gen, slow_s, slow_f);
  }

  // A total's field as a signed number (24-bit two's complement).
  static constexpr std::int64_t total(std::uint64_t field) noexcept {
    constexpr std::uint64_t kSign = std::uint64_t{1} << (THi::width - 1);
    return (field & kSign)
               ? static_cast<std::int64_t>(field) - static_cast<std::int64_t>(THi::max) - 1
               : static_cast<std::int64_t>(field);
  }

  // Adds signed differences to a totals word of generation `gen`. Not clamped: a
  // subtraction may land before the addition it cancels (see the class comment).
  static void add(std::atomic<std::uint64_t>& word, std::uint32_t gen, std::int64_t hi,
                  std::int64_t lo) noexcept {
    const std::uint32_t g = gen & TGen::max;
    std::uint64_t raw = word.load(std::memory_order_acquire);
    for (;;) {
      BULWARK_SCHEDULE_POINT("count.add: totals read");
      std::int64_t h = 0, l = 0;
      if (TGen::get(raw) == g) {
        h = total(THi::get(raw)), l = total(TLo::get(raw));
      } else if (detail::gen_after(TGen::get(raw), g, TGen::width)) {
        return;  // a later phase owns the totals
      }
      const std::uint64_t next =
          Totals::make(TGen::value(g), THi::value(static_cast<std::uint64_t>(h + hi) & THi::max),
                       TLo::value(static_cast<std::uint64_t>(l + lo) & TLo::max));
      if (word.compare_exchange_weak(raw, next, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        return;
    }
  }

  // Empties the totals for generation `gen`, unless some call of `gen` got there first.
  void reset_totals(std::uint32_t gen) noexcept {
    const std::uint32_t g = gen & TGen::max;
    for (auto* word : {&calls_, &slow_}) {
      std::uint64_t raw = word->load(std::memory_order_acquire);
      BULWARK_SCHEDULE_POINT("count.reset_totals: totals read");
      while (TGen::get(raw) != g && !detail::gen_after(TGen::get(raw), g, TGen::width)) {
        if (word->compare_exchange_weak(raw, Totals::make(TGen::value(g)),
                                        std::memory_order_acq_rel, std::memory_order_acquire))
          break;
      }
    }
  }

  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> slow_{0};
  detail::InFlight in_flight_;
  std::uint32_t size_;
  std::unique_ptr<std::atomic<std::uint16_t>[]> ring_;
};

// The last window.length of calls in `buckets` buckets (at most Capacity, inline).
// Recording a call is one CAS on its bucket; the bucket of a new period is claimed by
// the first call in it (one CAS on the head), which also clears the buckets the head
// skipped — at most Capacity of them, however long the gap.
template <std::uint32_t Capacity = 10>
class TimeWindow : public detail::HeadBase {
  static_assert(Capacity >= 1 && Capacity <= 4096);

 public:
  static constexpr WindowKind kind = WindowKind::time;
  static constexpr std::uint32_t capacity = Capacity;
  using config_type = TimeWindowConfig;

  explicit TimeWindow(const WindowParams&) noexcept {}

  // Places the first phase's newest bucket at the breaker's creation, `now`, so that a
  // clock stepping back before it is no time passing, as in every later phase. Only
  // while the breaker is being built (no other thread can see the window yet).
  void start(const WindowParams& p, Ticks now) noexcept {
    head_.store(detail::HeadWord::recording(0, 0, false, index_of(p, now)).raw(),
                std::memory_order_relaxed);
  }

  // Records a completed call of generation `gen` at `now`. `dropped` is set if this
  // call rotated the window, so that buckets left it.
  detail::Recorded record(const WindowParams& p, std::uint32_t gen, Ticks now,
                          detail::Sample s) noexcept {
    const std::uint64_t at = index_of(p, now);
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    bool rotated = false;
    for (;;) {
      const detail::HeadWord h(raw);
      if (!h.of(gen)) {
        if (h.after(gen)) return {h};  // stale
        // The first outcome of this generation: the window starts empty at `at`, in a
        // new lap, so that no bucket of an earlier phase can pass for one of this one.
        const detail::HeadWord next = detail::HeadWord::recording(gen, h.lap() + 1, false, at);
        BULWARK_SCHEDULE_POINT("time.record: start the phase");
        if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
          clear(p, at, next, p.buckets);
          raw = next.raw();
        }
        continue;
      }
      // A clock stepping back is no time passing: record into the newest bucket.
      const std::uint64_t i = std::max(at, h.pos());
      if (i > h.pos()) {
        // A gap of a whole window or more starts a new lap: every bucket is stale then,
        // and the new tags differ from the old ones however far the head jumped.
        const bool fresh = i - h.pos() >= p.buckets;
        const detail::HeadWord next =
            detail::HeadWord::recording(gen, fresh ? h.lap() + 1 : h.lap(), h.armed(), i);
        BULWARK_SCHEDULE_POINT("time.record: rotate");
        if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
          clear(p, i, next, fresh ? p.buckets : i - h.pos());
          raw = next.raw();
          rotated = true;
        }
        continue;
      }
      if (add(p, i, s, h)) return {h, rotated};
      // The head moved on: record in the new one.
      raw = head_.load(std::memory_order_acquire);
      BULWARK_SCHEDULE_POINT("time.record: head moved, read again");
    }
  }

  // Starts the window of a new phase of the breaker (see detail::Phase): a recording
  // phase starts empty at `now`, in a new lap.
  void begin_phase(const WindowParams& p, std::uint32_t gen, detail::Phase phase,
                   Ticks now) noexcept {
    in_flight_.begin(gen);
    if (phase != detail::Phase::recording)
      return begin_probing(gen, phase == detail::Phase::probing_carried);
    const std::uint64_t at = index_of(p, now);
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    for (;;) {
      const detail::HeadWord h(raw);
      if (h.of(gen) || h.after(gen)) return;  // an early call of the phase started it
      const detail::HeadWord next = detail::HeadWord::recording(gen, h.lap() + 1, false, at);
      BULWARK_SCHEDULE_POINT("time.begin_phase: cas");
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        clear(p, at, next, p.buckets);
        return;
      }
    }
  }

  WindowCounts counts(const WindowParams& p, std::uint32_t gen, Ticks now) const noexcept {
    WindowCounts c;
    const detail::HeadWord h(head_.load(std::memory_order_acquire));
    if (!h.of(gen)) return c;
    const std::uint64_t newest = h.pos();
    const std::uint64_t at = std::max(index_of(p, now), newest);
    // Buckets (at - buckets, newest]: the ones still inside the window at `now`.
    for (std::uint32_t k = 0; k < p.buckets; ++k) {
      if (newest < k) break;
      const std::uint64_t j = newest - k;
      if (j + p.buckets <= at) break;
      const Bucket& b = buckets_[j % p.buckets];
      // The slow word first: a slow call adds to `calls` before `slow`, and a bucket's
      // calls only grow under one tag, so a pair read in this order never shows more
      // slow calls than calls (the other order can, while calls are being recorded).
      const std::uint64_t w1 = b.slow.load(std::memory_order_acquire);
      BULWARK_SCHEDULE_POINT("time.counts: between the words");
      const std::uint64_t w0 = b.calls.load(std::memory_order_acquire);
      if (bucket_tag(w0) != tag(h.lap(), j)) continue;
      c.calls += field(w0, 1), c.failures += field(w0, 0);
      if (bucket_tag(w1) == tag(h.lap(), j))
        c.slow_successes += field(w1, 1), c.slow_failures += field(w1, 0);
    }
    return c;
  }

  detail::InFlight& in_flight() noexcept { return in_flight_; }
  const detail::InFlight& in_flight() const noexcept { return in_flight_; }
  std::uint64_t footprint() const noexcept { return 0; }

 private:
  friend struct WindowAccess;
  // A bucket is two self-tagged words: [tag 24 | calls 20 | failures 20] and
  // [tag 24 | slow successes 20 | slow failures 20]. The tag is the bucket's
  // generation and period (low bits), so a stale bucket is recognised, never merged.
  struct Bucket {
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> slow{0};
  };
  static constexpr std::uint64_t kFieldMax = (1u << 20) - 1;

  static std::uint64_t index_of(const WindowParams& p, Ticks now) noexcept {
    return static_cast<std::uint64_t>(std::max<Ticks>(0, now)) /
           static_cast<std::uint64_t>(p.bucket_width);
  }
  // A bucket's tag: its lap and period (low bits), with the top bit set so that no tag is
  // ever 0 — an empty bucket's word, never mistaken for a real one.
  static constexpr std::uint32_t tag(std::uint32_t lap, std::uint64_t index) noexcept {
    return 0x800000u | ((lap & 0x7Fu) << 16) | static_cast<std::uint32_t>(index & 0xFFFF);
  }
  static constexpr std::uint32_t bucket_tag(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w >> 40);
  }
  // field 1: the high count (calls / slow successes), field 0: the low one.
  static constexpr std::uint64_t field(std::uint64_t w, int which) noexcept {
    return which == 1 ? (w >> 20) & kFieldMax : w & kFieldMax;
  }
  static constexpr std::uint64_t make_word(std::uint32_t t, std::uint64_t hi,
                                           std::uint64_t lo) noexcept {
    return (std::uint64_t{t} << 40) | (std::min(hi, kFieldMax) << 20) | std::min(lo, kFieldMax);
  }

  // Adds to the calls word of bucket i if it is tagged for i, or takes it over if the
  // head is still exactly `at`; false if it is stale and the head moved (the caller reads
  // the head again). A bucket that reached the field limit stops counting (its rates are
  // those of its first million calls).
  static bool add_word(std::atomic<std::uint64_t>& word, const std::atomic<std::uint64_t>& head,
                       detail::HeadWord at, std::uint32_t t, std::uint64_t hi,
                       std::uint64_t lo) noexcept {
    std::uint64_t raw = word.load(std::memory_order_acquire);
    for (;;) {
      BULWARK_SCHEDULE_POINT("time.add_word: word read");
      std::uint64_t next = 0;
      if (bucket_tag(raw) == t) {
        if (field(raw, 1) == kFieldMax || field(raw, 0) == kFieldMax) return true;
        next = raw + (hi << 20) + lo;
      } else {
        // A stale bucket: take it over, but only while the head still says it is ours.
        if (head.load(std::memory_order_acquire) != at.raw()) return false;
        next = make_word(t, hi, lo);
        BULWARK_SCHEDULE_POINT("time.add_word: take over");
      }
      if (word.compare_exchange_weak(raw, next, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        return true;
    }
  }

  bool add(const WindowParams& p, std::uint64_t i, detail::Sample s, detail::HeadWord h) noexcept {
    Bucket& b = buckets_[i % p.buckets];
    const std::uint32_t t = tag(h.lap(), i);
    const bool failure = s == detail::Sample::failure || s == detail::Sample::slow_failure;
    if (!add_word(b.calls, head_, h, t, 1, failure ? 1 : 0)) return false;
    BULWARK_SCHEDULE_POINT("time.add: between the words");
    // Only slow calls touch the second word; readers ignore it while its tag is stale.
    if (s == detail::Sample::slow_success || s == detail::Sample::slow_failure)
      add_slow(b, t, s == detail::Sample::slow_success ? 1 : 0, s == detail::Sample::slow_failure);
    return true;
  }

  // Adds a slow call to the slow word of bucket `b`, whose calls word already counts it
  // under tag `t`. The slow word follows the calls word, not the head: every writer
  // tags a bucket's calls word before its slow word, so a slow word with another tag is
  // older than `t` (a clear not there yet, or cut short by a later rotation) and is
  // taken over as long as the calls word still holds `t` — whatever the head did
  // meanwhile (rotated on, or only flipped its armed bit). Once the calls word has
  // moved on, the bucket left the window with this call in it, and nothing is added.
  void add_slow(Bucket& b, std::uint32_t t, std::uint64_t hi, std::uint64_t lo) noexcept {
    std::uint64_t raw = b.slow.load(std::memory_order_acquire);
    for (;;) {
      BULWARK_SCHEDULE_POINT("time.add_slow: word read");
      std::uint64_t next = 0;
      if (bucket_tag(raw) == t) {
        if (field(raw, 1) == kFieldMax || field(raw, 0) == kFieldMax) return;
        next = raw + (hi << 20) + lo;
      } else {
        if (bucket_tag(b.calls.load(std::memory_order_acquire)) != t) return;
        next = make_word(t, hi, lo);
        BULWARK_SCHEDULE_POINT("time.add_slow: take over");
      }
      if (b.slow.compare_exchange_weak(raw, next, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
        return;
    }
  }

  // Empties the `n` buckets ending at `to` (n <= buckets: however long the gap, the
  // work is bounded). When a lap starts (n == buckets) every slot is rewritten: a slot
  // that no period at or before `to` uses yet (the clock is less than a window past its
  // epoch) is set to the untagged word, so that no tag of an earlier lap survives the
  // start of a lap — not even one the lap's 7 bits have come round to. Stops as soon as
  // the head moves past `installed`: whoever moved it clears from there.
  void clear(const WindowParams& p, std::uint64_t to, detail::HeadWord installed,
             std::uint64_t n) noexcept {
    for (std::uint64_t k = 0; k < n; ++k) {
      const bool used = k <= to;  // else the slot's first period of this lap is after `to`
      Bucket& b = buckets_[(to + p.buckets - k) % p.buckets];
      const std::uint32_t t = used ? tag(installed.lap(), to - k) : 0;
      const std::uint64_t empty = used ? make_word(t, 0, 0) : 0;
      for (auto* word : {&b.calls, &b.slow}) {
        std::uint64_t raw = word->load(std::memory_order_acquire);
        BULWARK_SCHEDULE_POINT("time.clear: word read");
        while (used ? bucket_tag(raw) != t : raw != 0) {
          if (head_.load(std::memory_order_acquire) != installed.raw()) return;
          BULWARK_SCHEDULE_POINT("time.clear: head checked");
          if (word->compare_exchange_weak(raw, empty, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
            break;
          }
        }
      }
    }
  }

  std::array<Bucket, Capacity> buckets_{};
  detail::InFlight in_flight_;
};

}  // namespace bulwark

#endif  // BULWARK_SLIDING_WINDOW_H_
