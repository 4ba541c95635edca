// bulwark/sliding_window.h — what a breaker remembers of recent calls.
//
// A breaker that trips on a failure *rate* needs a window of recent outcomes. The
// window is the breaker's second template parameter, so a breaker that only counts
// consecutive failures pays nothing for it:
//
//   bulwark::CircuitBreaker              // NoWindow: consecutive failures only, 64 bytes
//   bulwark::CountWindowBreaker          // the last N calls (window.size)
//   bulwark::TimeWindowBreaker           // the last T (window.length) in B buckets, 256 bytes
//   bulwark::StripedTimeWindowBreaker<S> // the same, striped by thread: 192 x (S + 1) bytes
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
#include <type_traits>

#include "bulwark/breaker_config.h"
#include "bulwark/clock.h"
#include "bulwark/detail/bitfield.h"
#include "bulwark/detail/schedule_point.h"
#include "bulwark/detail/thread_slot.h"
#include "bulwark/detail/window_parts.h"

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
//
// Stripes > 1: every bucket is kept once per stripe, each stripe on cache lines of its
// own (sizeof grows by Stripes x Capacity x 16 bytes, rounded up to 64 per stripe), and a
// call adds to the stripe of its thread (detail::thread_slot() % Stripes), so threads
// with different stripes recording in one bucket period write no common line: the head
// word stays shared, but is only written when a period begins, a phase starts or the
// armed bit flips. Reading the window (a judgement, counts(), snapshots) sums the stripes
// and clearing a bucket clears it in every stripe (Stripes times the work of one). At
// rest it reads the same as one stripe; while calls are in flight, a reading sees each
// stripe's bucket as of its last write, as a single bucket is seen.
template <std::uint32_t Capacity = 10, std::uint32_t Stripes = 1>
class TimeWindow : public detail::HeadBase {
  static_assert(Capacity >= 1 && Capacity <= 4096);
  static_assert(Stripes >= 1 && Stripes <= 64);

 public:
  static constexpr WindowKind kind = WindowKind::time;
  static constexpr std::uint32_t capacity = Capacity;
  static constexpr std::uint32_t stripes = Stripes;
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
      for (const Stripe& stripe : stripes_) {
        const Bucket& b = stripe.buckets[j % p.buckets];
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
  // One stripe's buckets; with several stripes, each on lines of its own.
  struct PlainStripe {
    std::array<Bucket, Capacity> buckets{};
  };
  struct alignas(64) LineStripe {
    std::array<Bucket, Capacity> buckets{};
  };
  using Stripe = std::conditional_t<Stripes == 1, PlainStripe, LineStripe>;

  // The calling thread's stripe.
  Stripe& own_stripe() noexcept {
    if constexpr (Stripes == 1) {
      return stripes_[0];
    } else {
      return stripes_[detail::thread_slot() % Stripes];
    }
  }
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
    Bucket& b = own_stripe().buckets[i % p.buckets];
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

  // Empties the `n` buckets ending at `to`, in every stripe (n <= buckets: however long
  // the gap, the work is bounded). When a lap starts (n == buckets) every slot is rewritten: a slot
  // that no period at or before `to` uses yet (the clock is less than a window past its
  // epoch) is set to the untagged word, so that no tag of an earlier lap survives the
  // start of a lap — not even one the lap's 7 bits have come round to. Stops as soon as
  // the head moves past `installed`: whoever moved it clears from there.
  void clear(const WindowParams& p, std::uint64_t to, detail::HeadWord installed,
             std::uint64_t n) noexcept {
    for (std::uint64_t k = 0; k < n; ++k) {
      const bool used = k <= to;  // else the slot's first period of this lap is after `to`
      const std::uint32_t t = used ? tag(installed.lap(), to - k) : 0;
      const std::uint64_t empty = used ? make_word(t, 0, 0) : 0;
      for (Stripe& stripe : stripes_) {
        Bucket& b = stripe.buckets[(to + p.buckets - k) % p.buckets];
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
  }

  std::array<Stripe, Stripes> stripes_{};
  detail::InFlight in_flight_;
};

}  // namespace bulwark

#endif  // BULWARK_SLIDING_WINDOW_H_
