// Internal: the circuit breaker's 64-bit state word. Not part of the public API.
//
// Everything a decision must see together lives in one word, so every decision is a
// single compare-and-swap and no thread ever sees a half-made transition:
//
//   bits  0- 2  state       closed / open / half_open / forced_open / disabled / metrics_only
//   bit      3  pending     a transition's winner is still publishing it (its time and events)
//   bits  4- 7  request     a transition asked for while pending; the publisher applies it
//   bits  8-12  reopens     consecutive openings since the last close (saturates at 31)
//   bits 13-28  a           CLOSED: consecutive failures. HALF_OPEN: probes in flight
//   bits 29-41  b           HALF_OPEN: probe successes in the current ramp stage
//   bits 42-44  stage       HALF_OPEN with a traffic fraction: the ramp stage
//   bits 45-63  generation  +1 on every transition (19 bits, wraps)
//
// A permit remembers the word it was admitted under; its outcome only counts while the
// generation is unchanged. The generation wraps after 524,288 transitions, so an
// outcome reported after exactly a multiple of that many transitions would be taken as
// current. Automatic transitions are paced by open periods and probe rounds; only a
// program issuing manual transitions in a tight loop while a call is outstanding could
// get there, and the cost would be one outcome counted in the wrong generation.

#ifndef BULWARK_DETAIL_BREAKER_WORD_H_
#define BULWARK_DETAIL_BREAKER_WORD_H_

#include <cstdint>

namespace bulwark::detail {

enum class Request : std::uint8_t {
  none = 0,
  // Automatic transitions, decided by outcomes while a transition was being published.
  close = 1,  // HALF_OPEN: enough probes succeeded
  open = 2,   // CLOSED: consecutive failures; HALF_OPEN: the probes failed
  // Manual transitions (BasicCircuitBreaker::transition_to / reset).
  manual_reset = 3,
  manual_open = 4,
  manual_half_open = 5,
  manual_forced_open = 6,
  manual_disabled = 7,
  manual_metrics_only = 8,
  open_failure_rate = 9,     // CLOSED: the failure rate reached its threshold
  open_slow_call_rate = 10,  // CLOSED: the slow-call rate reached its threshold
};

// Which request wins when a second one arrives before the first was applied:
// manual ones replace everything (the last operator action wins), and a reopen
// beats a close ("any probe failure reopens").
constexpr int request_priority(Request r) noexcept {
  switch (r) {
    case Request::none:
      return 0;
    case Request::close:
      return 1;
    case Request::open:
    case Request::open_failure_rate:
    case Request::open_slow_call_rate:
      return 2;
    case Request::manual_reset:
    case Request::manual_open:
    case Request::manual_half_open:
    case Request::manual_forced_open:
    case Request::manual_disabled:
    case Request::manual_metrics_only:
      return 3;
  }
  return 3;
}

class Word {
 public:
  static constexpr unsigned kStateBits = 3, kStateShift = 0;
  static constexpr unsigned kPendingShift = 3;
  static constexpr unsigned kRequestBits = 4, kRequestShift = 4;
  static constexpr unsigned kReopenBits = 5, kReopenShift = 8;
  static constexpr unsigned kABits = 16, kAShift = 13;
  static constexpr unsigned kBBits = 13, kBShift = 29;
  static constexpr unsigned kStageBits = 3, kStageShift = 42;
  static constexpr unsigned kGenBits = 19, kGenShift = 45;
  static_assert(kGenShift + kGenBits == 64);

  static constexpr std::uint64_t kStateMask = (1u << kStateBits) - 1;
  static constexpr std::uint32_t kReopenMax = (1u << kReopenBits) - 1;
  static constexpr std::uint32_t kCountMax = (1u << kABits) - 1;    // a
  static constexpr std::uint32_t kSuccessMax = (1u << kBBits) - 1;  // b
  static constexpr std::uint32_t kStageMax = (1u << kStageBits) - 1;
  static constexpr std::uint32_t kGenMask = (1u << kGenBits) - 1;

  constexpr Word() noexcept = default;
  constexpr explicit Word(std::uint64_t raw) noexcept : raw_(raw) {}
  constexpr std::uint64_t raw() const noexcept { return raw_; }

  constexpr std::uint8_t state() const noexcept {
    return static_cast<std::uint8_t>(get(kStateShift, kStateBits));
  }
  constexpr bool pending() const noexcept { return get(kPendingShift, 1) != 0; }
  constexpr Request request() const noexcept {
    return static_cast<Request>(get(kRequestShift, kRequestBits));
  }
  constexpr std::uint32_t reopens() const noexcept { return get(kReopenShift, kReopenBits); }
  constexpr std::uint32_t a() const noexcept { return get(kAShift, kABits); }
  constexpr std::uint32_t b() const noexcept { return get(kBShift, kBBits); }
  constexpr std::uint32_t stage() const noexcept { return get(kStageShift, kStageBits); }
  constexpr std::uint32_t gen() const noexcept { return get(kGenShift, kGenBits); }

  constexpr Word with_state(std::uint8_t s) const noexcept {
    return set(kStateShift, kStateBits, s);
  }
  constexpr Word with_pending(bool p) const noexcept { return set(kPendingShift, 1, p ? 1 : 0); }
  constexpr Word with_request(Request r) const noexcept {
    return set(kRequestShift, kRequestBits, static_cast<std::uint32_t>(r));
  }
  constexpr Word with_reopens(std::uint32_t r) const noexcept {
    return set(kReopenShift, kReopenBits, r > kReopenMax ? kReopenMax : r);
  }
  constexpr Word with_a(std::uint32_t v) const noexcept { return set(kAShift, kABits, v); }
  constexpr Word with_b(std::uint32_t v) const noexcept { return set(kBShift, kBBits, v); }
  constexpr Word with_stage(std::uint32_t v) const noexcept {
    return set(kStageShift, kStageBits, v);
  }
  constexpr Word with_gen(std::uint32_t g) const noexcept {
    return set(kGenShift, kGenBits, g & kGenMask);
  }

  // The word a transition produces: a new generation, counters cleared, published
  // by its winner (pending) with no request outstanding.
  constexpr Word next_phase(std::uint8_t s, std::uint32_t reopens) const noexcept {
    return Word().with_state(s).with_pending(true).with_reopens(reopens).with_gen(gen() + 1);
  }

  friend constexpr bool operator==(Word, Word) noexcept = default;

 private:
  constexpr std::uint32_t get(unsigned shift, unsigned bits) const noexcept {
    return static_cast<std::uint32_t>((raw_ >> shift) & ((std::uint64_t{1} << bits) - 1));
  }
  constexpr Word set(unsigned shift, unsigned bits, std::uint32_t v) const noexcept {
    const std::uint64_t mask = ((std::uint64_t{1} << bits) - 1) << shift;
    return Word((raw_ & ~mask) | ((std::uint64_t{v} << shift) & mask));
  }

  std::uint64_t raw_ = 0;
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_BREAKER_WORD_H_
