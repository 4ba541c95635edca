// Internal: the circuit breaker's 64-bit state word. Not part of the public API.
//
// Everything a decision must see together lives in one word, so every decision is a
// single compare-and-swap and no thread ever sees a half-made transition. Common to
// every state:
//
//   bits  0- 2  state       closed / open / half_open / forced_open / disabled / metrics_only
//   bit      3  pending     a transition's winner is still publishing it (its time and events)
//   bits  4- 7  request     a transition asked for while pending; the publisher applies it
//   bits  8-12  reopens     OPEN / HALF_OPEN: consecutive openings (saturates at 31);
//                           CLOSED: the count the breaker recovered at, which a flapping
//                           reopening continues from
//   bits 45-63  generation  +1 on every transition (19 bits, wraps)
//
// and bits 13-44 read per state (each reading is a checked Layout below):
//
//   CLOSED, METRICS_ONLY   bits 13-28  consecutive failures
//   HALF_OPEN              bits 13-28  probes in flight
//                          bits 29-41  probe successes in the current ramp stage
//                          bits 42-44  ramp stage (traffic-fraction mode)
//
// A permit remembers the word it was admitted under; its outcome only counts while the
// generation is unchanged. The generation wraps after 524,288 transitions, so an outcome
// reported after exactly a multiple of that many transitions would be taken as current.

#ifndef BULWARK_DETAIL_BREAKER_WORD_H_
#define BULWARK_DETAIL_BREAKER_WORD_H_

#include <cstdint>

#include "bulwark/detail/bitfield.h"

namespace bulwark::detail {

enum class Request : std::uint8_t {
  none = 0,
  // Automatic transitions, decided by outcomes while a transition was being published.
  close = 1,  // HALF_OPEN: the probes succeeded
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

namespace word {
using State = Field<0, 3, std::uint8_t>;
using Pending = Field<3, 1, bool>;
using Req = Field<4, 4, Request>;
using Reopens = Field<8, 5, std::uint32_t>;
using ConsecutiveFailures = Field<13, 16, std::uint32_t>;
using ProbesInFlight = Field<13, 16, std::uint32_t>;
using ProbeSuccesses = Field<29, 13, std::uint32_t>;
using Stage = Field<42, 3, std::uint32_t>;
using Generation = Field<45, 19, std::uint32_t>;

using ClosedView = Layout<State, Pending, Req, Reopens, ConsecutiveFailures, Generation>;
using HalfOpenView =
    Layout<State, Pending, Req, Reopens, ProbesInFlight, ProbeSuccesses, Stage, Generation>;
static_assert(HalfOpenView::used == ~std::uint64_t{0}, "the half-open view uses every bit");
}  // namespace word

class Word {
 public:
  static constexpr std::uint64_t kStateMask = word::State::max;
  static constexpr std::uint32_t kReopenMax = word::Reopens::max;
  static constexpr std::uint32_t kCountMax = word::ConsecutiveFailures::max;
  static constexpr std::uint32_t kInFlightMax = word::ProbesInFlight::max;
  static constexpr std::uint32_t kSuccessMax = word::ProbeSuccesses::max;
  static constexpr std::uint32_t kStageMax = word::Stage::max;
  static constexpr std::uint32_t kGenMask = word::Generation::max;

  constexpr Word() noexcept = default;
  constexpr explicit Word(std::uint64_t raw) noexcept : raw_(raw) {}
  constexpr std::uint64_t raw() const noexcept { return raw_; }

  constexpr std::uint8_t state() const noexcept { return word::State::get(raw_); }
  constexpr bool pending() const noexcept { return word::Pending::get(raw_); }
  constexpr Request request() const noexcept { return word::Req::get(raw_); }
  constexpr std::uint32_t reopens() const noexcept { return word::Reopens::get(raw_); }
  constexpr std::uint32_t gen() const noexcept { return word::Generation::get(raw_); }
  // CLOSED / METRICS_ONLY.
  constexpr std::uint32_t consecutive_failures() const noexcept {
    return word::ConsecutiveFailures::get(raw_);
  }
  // HALF_OPEN.
  constexpr std::uint32_t probes_in_flight() const noexcept {
    return word::ProbesInFlight::get(raw_);
  }
  constexpr std::uint32_t probe_successes() const noexcept {
    return word::ProbeSuccesses::get(raw_);
  }
  constexpr std::uint32_t stage() const noexcept { return word::Stage::get(raw_); }

  constexpr Word with_state(std::uint8_t s) const noexcept {
    return Word(word::State::set(raw_, s));
  }
  constexpr Word with_pending(bool p) const noexcept { return Word(word::Pending::set(raw_, p)); }
  constexpr Word with_request(Request r) const noexcept { return Word(word::Req::set(raw_, r)); }
  constexpr Word with_reopens(std::uint32_t r) const noexcept {
    return Word(word::Reopens::set_saturated(raw_, r));
  }
  constexpr Word with_gen(std::uint32_t g) const noexcept {
    return Word(word::Generation::set(raw_, g));
  }
  constexpr Word with_consecutive_failures(std::uint32_t v) const noexcept {
    return Word(word::ConsecutiveFailures::set_saturated(raw_, v));
  }
  constexpr Word with_probes_in_flight(std::uint32_t v) const noexcept {
    return Word(word::ProbesInFlight::set_saturated(raw_, v));
  }
  constexpr Word with_probe_successes(std::uint32_t v) const noexcept {
    return Word(word::ProbeSuccesses::set_saturated(raw_, v));
  }
  constexpr Word with_stage(std::uint32_t v) const noexcept {
    return Word(word::Stage::set_saturated(raw_, v));
  }

  // The word a transition produces: a new generation, the state's fields cleared,
  // published by its winner (pending) with no request outstanding.
  constexpr Word next_phase(std::uint8_t s, std::uint32_t reopens) const noexcept {
    return Word().with_state(s).with_pending(true).with_reopens(reopens).with_gen(gen() + 1);
  }

  friend constexpr bool operator==(Word, Word) noexcept = default;

 private:
  std::uint64_t raw_ = 0;
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_BREAKER_WORD_H_
