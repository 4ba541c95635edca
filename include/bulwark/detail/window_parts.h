// Internal: the parts the sliding windows are built from — samples, generations, the
// head word (recording position or probe tally), and the count of calls in flight
// (InFlight). Not part of the public API; sliding_window.h includes it.

#ifndef BULWARK_DETAIL_WINDOW_PARTS_H_
#define BULWARK_DETAIL_WINDOW_PARTS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "bulwark/clock.h"
#include "bulwark/detail/bitfield.h"
#include "bulwark/detail/schedule_point.h"

namespace bulwark {

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

}  // namespace bulwark

#endif  // BULWARK_DETAIL_WINDOW_PARTS_H_
