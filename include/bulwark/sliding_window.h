// bulwark/sliding_window.h — what a breaker remembers of recent calls.
//
// A breaker that trips on a failure *rate* needs a window of recent outcomes. The
// window is the breaker's second template parameter, so a breaker that only counts
// consecutive failures pays nothing for it:
//
//   bulwark::CircuitBreaker              // NoWindow: consecutive failures only, 64 bytes
//   bulwark::CountWindowBreaker          // the last N calls (window_size)
//   bulwark::TimeWindowBreaker           // the last T (window_length) in B buckets, 256 bytes
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

// How a completed call lands in a window.
enum class Sample : std::uint8_t { success = 1, failure = 2, slow_success = 3, slow_failure = 4 };

constexpr Sample make_sample(bool failure, bool slow) noexcept {
  return failure ? (slow ? Sample::slow_failure : Sample::failure)
                 : (slow ? Sample::slow_success : Sample::success);
}

// Generations are 19-bit counters that wrap; `a` is newer than `b` if it is ahead by
// less than half the range.
constexpr std::uint32_t kGenBits = 19;
constexpr std::uint32_t kGenMask = (1u << kGenBits) - 1;
constexpr bool gen_newer(std::uint32_t a, std::uint32_t b) noexcept {
  const std::uint32_t d = (a - b) & kGenMask;
  return d != 0 && d < (1u << (kGenBits - 1));
}

// The window's head word. In a recording phase (CLOSED, METRICS_ONLY) it holds the
// newest bucket (or call count), the lap, and whether a rate rule is "armed" (over its
// threshold, waiting for the minimum volume); in a HALF_OPEN phase it holds that round's
// probe tally instead. The generation (its low 12 bits: it is only ever compared with
// the breaker's current one) says which phase the word belongs to.
//   recording: [gen 12 | lap 7 | armed 1 | position 44]
//   probing:   [gen 12 | 0 7   | completed 15 | failures 15 | slow 15]
// The lap changes whenever a time window starts afresh (a new phase, or a gap of a
// whole window or more): bucket tags are made of it, so a bucket left from an earlier
// lap never passes for a current one, however far the head jumped.
class HeadWord {
 public:
  static constexpr unsigned kPosBits = 44;
  static constexpr std::uint64_t kPosMask = (std::uint64_t{1} << kPosBits) - 1;
  static constexpr std::uint32_t kLapMask = (1u << 7) - 1;
  static constexpr std::uint32_t kGenMask12 = (1u << 12) - 1;
  static constexpr std::uint32_t kProbeMax = (1u << 15) - 1;

  constexpr HeadWord() noexcept = default;
  constexpr explicit HeadWord(std::uint64_t raw) noexcept : raw_(raw) {}
  static constexpr HeadWord recording(std::uint32_t gen, std::uint32_t lap, bool armed,
                                      std::uint64_t pos) noexcept {
    return HeadWord((std::uint64_t{gen & kGenMask12} << 52) |
                    (std::uint64_t{lap & kLapMask} << 45) | (std::uint64_t{armed} << 44) |
                    (pos & kPosMask));
  }
  static constexpr HeadWord probing(std::uint32_t gen, std::uint32_t completed,
                                    std::uint32_t failures, std::uint32_t slow) noexcept {
    return HeadWord((std::uint64_t{gen & kGenMask12} << 52) |
                    (std::uint64_t{std::min(completed, kProbeMax)} << 30) |
                    (std::uint64_t{std::min(failures, kProbeMax)} << 15) |
                    std::min(slow, kProbeMax));
  }
  constexpr std::uint64_t raw() const noexcept { return raw_; }
  // True if the word belongs to the breaker's generation `gen`.
  constexpr bool of(std::uint32_t gen) const noexcept { return gen12() == (gen & kGenMask12); }
  // True if the word belongs to a generation after `gen` (within half the 12-bit range).
  constexpr bool after(std::uint32_t gen) const noexcept {
    const std::uint32_t d = (gen12() - gen) & kGenMask12;
    return d != 0 && d < (kGenMask12 + 1) / 2;
  }
  constexpr std::uint32_t lap() const noexcept {
    return static_cast<std::uint32_t>((raw_ >> 45) & kLapMask);
  }
  constexpr bool armed() const noexcept { return ((raw_ >> 44) & 1) != 0; }
  constexpr std::uint64_t pos() const noexcept { return raw_ & kPosMask; }
  constexpr std::uint32_t completed() const noexcept {
    return static_cast<std::uint32_t>((raw_ >> 30) & kProbeMax);
  }
  constexpr std::uint32_t failures() const noexcept {
    return static_cast<std::uint32_t>((raw_ >> 15) & kProbeMax);
  }
  constexpr std::uint32_t slow() const noexcept {
    return static_cast<std::uint32_t>(raw_ & kProbeMax);
  }

 private:
  constexpr std::uint32_t gen12() const noexcept { return static_cast<std::uint32_t>(raw_ >> 52); }
  std::uint64_t raw_ = 0;
};

// Probe outcomes of the current half-open round (completed / failures / slow).
struct ProbeTally {
  std::uint32_t completed = 0, failures = 0, slow = 0;
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
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
        return;
    }
  }

  // Adds one probe outcome to the round `gen`. Returns the round's tally including it,
  // or an empty tally if the round is already over.
  ProbeTally probe(std::uint32_t gen, bool failure, bool slow) noexcept {
    std::uint64_t raw = head_.load(std::memory_order_acquire);
    for (;;) {
      const HeadWord h(raw);
      ProbeTally t;
      if (h.of(gen)) {
        t = {h.completed(), h.failures(), h.slow()};
      } else if (h.after(gen)) {
        return {};  // a later phase has started: this probe is stale
      }
      t.completed += 1, t.failures += failure ? 1 : 0, t.slow += slow ? 1 : 0;
      const HeadWord next = HeadWord::probing(gen, t.completed, t.failures, t.slow);
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return t;
      }
    }
  }

  ProbeTally probe_tally(std::uint32_t gen) const noexcept {
    const HeadWord h(head_.load(std::memory_order_acquire));
    if (!h.of(gen)) return {};
    return {h.completed(), h.failures(), h.slow()};
  }

 protected:
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
//   slot:    [gen 19 | epoch 21 | count 24]
//   ancient: [gen 19 | count 45, two's complement]
class InFlight {
 public:
  struct Admission {
    std::uint64_t epoch;  // the epoch the call was counted in (>= the one asked for)
    bool new_epoch;       // this admission started it: time to re-evaluate slowness
  };

  // Counts a call admitted at `epoch`. A thread that arrives late (its clock read is
  // older than an epoch another thread already started) is counted in the newer one.
  Admission admit(std::uint32_t gen, std::uint64_t epoch) noexcept {
    for (;;) {
      auto& slot = slots_[epoch & 1];
      std::uint64_t raw = slot.load(std::memory_order_acquire);
      if (slot_gen(raw) == gen && slot_epoch(raw) == (epoch & kEpochMask)) {  // the common case
        if (slot.compare_exchange_weak(raw, raw + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
          return {epoch, false};
        }
        continue;
      }
      // A late thread (its clock read is older than an epoch another thread already
      // started) is counted in the newer epoch.
      const std::uint64_t other = slots_[(epoch + 1) & 1].load(std::memory_order_acquire);
      if (slot_gen(other) == gen && is_ahead(slot_epoch(other), epoch)) {
        epoch += (slot_epoch(other) - epoch) & kEpochMask;
        continue;
      }
      if (slot_gen(raw) == gen && is_ahead(slot_epoch(raw), epoch)) {
        epoch += (slot_epoch(raw) - epoch) & kEpochMask;
        continue;
      }
      // The slot holds an older epoch (or generation): recycle it. Its calls were
      // admitted at least one epoch before ours began, so they are slow already.
      const std::uint64_t moved = slot_gen(raw) == gen ? (raw & kCountMask) : 0;
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
    while (slot_gen(raw) == gen && slot_epoch(raw) == (epoch & kEpochMask) &&
           (raw & kCountMask) != 0) {
      if (slot.compare_exchange_weak(raw, raw - 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        return;
    }
    add_ancient(gen, -1);  // its slot was recycled: it was counted in the ancient count
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

  // Calls of generation `gen` admitted before `now - slow` and still in flight.
  std::uint64_t slow_calls(std::uint32_t gen, Ticks now, Ticks slow,
                           unsigned shift) const noexcept {
    std::int64_t n = 0;
    const Ticks cutoff = saturating_sub(now, slow);
    const std::uint64_t epoch_now = epoch_of(now, shift);
    for (const auto& s : slots_) {
      const std::uint64_t raw = s.load(std::memory_order_acquire);
      if (slot_gen(raw) != gen || (raw & kCountMask) == 0) continue;
      if (is_ahead(slot_epoch(raw), epoch_now)) continue;  // newer than our reading of the clock
      // Every call of the slot's epoch began before the cutoff only if the epoch ended by then.
      const std::uint64_t e = unwrap_epoch(slot_epoch(raw), epoch_now);
      if (epoch_start(e + 1, shift) <= cutoff) n += static_cast<std::int64_t>(raw & kCountMask);
    }
    const std::uint64_t a = ancient_.load(std::memory_order_acquire);
    if (static_cast<std::uint32_t>(a >> 45) == gen) n += ancient_count(a);
    return n > 0 ? static_cast<std::uint64_t>(n) : 0;
  }

 private:
  static constexpr std::uint64_t kCountMask = (std::uint64_t{1} << 24) - 1;
  static constexpr std::uint64_t kEpochMask = (std::uint64_t{1} << 21) - 1;
  static constexpr std::uint64_t kAncientMask = (std::uint64_t{1} << 45) - 1;

  static constexpr std::uint32_t slot_gen(std::uint64_t raw) noexcept {
    return static_cast<std::uint32_t>(raw >> 45);
  }
  // True if epoch (low bits) `lo` is up to 1024 epochs after `epoch`: a slot newer than
  // a late thread's reading of the clock (preempted, or a clock stepped back), which it
  // must not recycle. Further ahead means a slot left over from long ago (epochs wrap
  // at 2^21): that one is old. 1024 epochs is at least a second (epochs are >= 1 ms).
  // Epochs wrap, so "far ahead" and "long ago" look alike; we read them as long ago,
  // since a steady clock never steps back: a clock set back by more than 1024 epochs
  // (a ManualClock, say) makes the calls then in flight count as slow.
  static constexpr bool is_ahead(std::uint64_t lo, std::uint64_t epoch) noexcept {
    const std::uint64_t d = (lo - epoch) & kEpochMask;
    return d != 0 && d <= 1024;
  }
  static constexpr std::uint64_t slot_epoch(std::uint64_t raw) noexcept {
    return (raw >> 24) & kEpochMask;
  }
  static constexpr std::uint64_t make_slot(std::uint32_t gen, std::uint64_t epoch,
                                           std::uint64_t count) noexcept {
    return (std::uint64_t{gen & kGenMask} << 45) | ((epoch & kEpochMask) << 24) | count;
  }
  // The full epoch whose low bits are `lo`, at or before `now_epoch`.
  static constexpr std::uint64_t unwrap_epoch(std::uint64_t lo, std::uint64_t now_epoch) noexcept {
    const std::uint64_t back = (now_epoch - lo) & kEpochMask;
    return back > now_epoch ? 0 : now_epoch - back;
  }
  static constexpr std::int64_t ancient_count(std::uint64_t raw) noexcept {
    const std::uint64_t c = raw & kAncientMask;
    return (c & (std::uint64_t{1} << 44))
               ? static_cast<std::int64_t>(c) - static_cast<std::int64_t>(kAncientMask) - 1
               : static_cast<std::int64_t>(c);
  }

  void add_ancient(std::uint32_t gen, std::int64_t delta) noexcept {
    std::uint64_t raw = ancient_.load(std::memory_order_acquire);
    for (;;) {
      std::int64_t c = 0;
      const std::uint32_t g = static_cast<std::uint32_t>(raw >> 45);
      if (g == gen) {
        c = ancient_count(raw);
      } else if (gen_newer(g, gen)) {
        return;  // a later generation owns the count now: ours is forgotten
      }
      const std::uint64_t next = (std::uint64_t{gen & kGenMask} << 45) |
                                 (static_cast<std::uint64_t>(c + delta) & kAncientMask);
      if (ancient_.compare_exchange_weak(raw, next, std::memory_order_acq_rel,
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
  Ticks bucket_width = 0;        // time window: window_length / buckets
  Ticks slow_call_duration = 0;  // 0: slowness is not judged
  bool track_in_flight = false;  // count calls in flight longer than slow_call_duration
  unsigned epoch_shift = 0;      // in-flight epochs last 2^epoch_shift >= slow_call_duration ns
};

// No window: the breaker only counts consecutive failures. Costs nothing.
struct NoWindow {
  static constexpr WindowKind kind = WindowKind::none;
  constexpr explicit NoWindow(const WindowParams&) noexcept {}
};

// The last `window_size` calls, exactly. A ring of one byte per call, allocated once
// with the breaker. Each byte keeps five bits of its call's generation, which only has
// to tell a written slot from one claimed by a call still being recorded (or left from
// an earlier phase): the cursor, which carries the generation, says which slots count. Recording a
// call is one CAS on the cursor and one byte store; reading the window scans the ring (window_size
// bytes), which the breaker does only when a failure or a slow call might change its mind.
class CountWindow : public detail::HeadBase {
 public:
  static constexpr WindowKind kind = WindowKind::count;

  explicit CountWindow(const WindowParams& p)
      : size_(p.size), ring_(new std::atomic<std::uint8_t>[p.size]) {
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
      const detail::HeadWord next = detail::HeadWord::recording(gen, 0, armed, n + 1);
      if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        ring_[n % size_].store(tag(gen, s), std::memory_order_release);
        return {next};
      }
    }
  }

  WindowCounts counts(const WindowParams&, std::uint32_t gen, Ticks) const noexcept {
    WindowCounts c;
    const detail::HeadWord h(head_.load(std::memory_order_acquire));
    if (!h.of(gen)) return c;
    const std::uint64_t filled = std::min<std::uint64_t>(h.pos(), size_);
    const std::uint8_t g = static_cast<std::uint8_t>((gen & 31) << 3);
    for (std::uint64_t i = 0; i < filled; ++i) {
      const std::uint8_t v = ring_[i].load(std::memory_order_relaxed);
      if ((v & 0xF8) != g) continue;  // claimed but not written yet, or an older generation
      add(c, static_cast<detail::Sample>(v & 7));
    }
    return c;
  }

  detail::InFlight& in_flight() noexcept { return in_flight_; }
  const detail::InFlight& in_flight() const noexcept { return in_flight_; }
  std::uint64_t footprint() const noexcept { return size_; }  // bytes allocated besides sizeof

 private:
  friend struct WindowAccess;
  static std::uint8_t tag(std::uint32_t gen, detail::Sample s) noexcept {
    return static_cast<std::uint8_t>(((gen & 31) << 3) | static_cast<std::uint8_t>(s));
  }
  static void add(WindowCounts& c, detail::Sample s) noexcept {
    c.calls += 1;
    switch (s) {
      case detail::Sample::success:
        break;
      case detail::Sample::failure:
        c.failures += 1;
        break;
      case detail::Sample::slow_success:
        c.slow_successes += 1;
        break;
      case detail::Sample::slow_failure:
        c.failures += 1, c.slow_failures += 1;
        break;
    }
  }

  detail::InFlight in_flight_;
  std::uint32_t size_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> ring_;
};

// The last window_length of calls in `buckets` buckets (at most Capacity, inline).
// Recording a call is one CAS on its bucket; the bucket of a new period is claimed by
// the first call in it (one CAS on the head), which also clears the buckets the head
// skipped — at most Capacity of them, however long the gap.
template <std::uint32_t Capacity = 10>
class TimeWindow : public detail::HeadBase {
  static_assert(Capacity >= 1 && Capacity <= 4096);

 public:
  static constexpr WindowKind kind = WindowKind::time;
  static constexpr std::uint32_t capacity = Capacity;

  explicit TimeWindow(const WindowParams&) noexcept {}

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
        if (head_.compare_exchange_weak(raw, next.raw(), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
          clear(p, i, next, fresh ? p.buckets : i - h.pos());
          raw = next.raw();
          rotated = true;
        }
        continue;
      }
      if (add(p, i, s, h)) return {h, rotated};
      raw = head_.load(std::memory_order_acquire);  // the head moved on: record in the new one
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
      const std::uint64_t w0 = b.calls.load(std::memory_order_acquire);
      if (bucket_tag(w0) != tag(h.lap(), j)) continue;
      const std::uint64_t w1 = b.slow.load(std::memory_order_acquire);
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

  // Adds to one word of bucket i if the head is still at i. A bucket that reached the
  // field limit stops counting (its rates are those of its first million calls).
  static bool add_word(std::atomic<std::uint64_t>& word, const std::atomic<std::uint64_t>& head,
                       detail::HeadWord at, std::uint32_t t, std::uint64_t hi,
                       std::uint64_t lo) noexcept {
    std::uint64_t raw = word.load(std::memory_order_acquire);
    for (;;) {
      std::uint64_t next = 0;
      if (bucket_tag(raw) == t) {
        if (field(raw, 1) == kFieldMax || field(raw, 0) == kFieldMax) return true;
        next = raw + (hi << 20) + lo;
      } else {
        // A stale bucket: take it over, but only while the head still says it is ours.
        if (head.load(std::memory_order_acquire) != at.raw()) return false;
        next = make_word(t, hi, lo);
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
    // Only slow calls touch the second word; readers ignore it while its tag is stale.
    if (s == detail::Sample::slow_success || s == detail::Sample::slow_failure) {
      (void)add_word(b.slow, head_, h, t, s == detail::Sample::slow_success ? 1 : 0,
                     s == detail::Sample::slow_failure ? 1 : 0);
    }
    return true;
  }

  // Empties the `n` buckets ending at `to` (n <= buckets: however long the gap, the
  // work is bounded). Stops as soon as the head moves past `installed`: whoever moved
  // it clears from there.
  void clear(const WindowParams& p, std::uint64_t to, detail::HeadWord installed,
             std::uint64_t n) noexcept {
    for (std::uint64_t k = 0; k < n && k <= to; ++k) {
      const std::uint64_t j = to - k;
      Bucket& b = buckets_[j % p.buckets];
      const std::uint32_t t = tag(installed.lap(), j);
      for (auto* word : {&b.calls, &b.slow}) {
        std::uint64_t raw = word->load(std::memory_order_acquire);
        while (bucket_tag(raw) != t) {
          if (head_.load(std::memory_order_acquire) != installed.raw()) return;
          if (word->compare_exchange_weak(raw, make_word(t, 0, 0), std::memory_order_acq_rel,
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
