// Internal: the circuit breaker's state machine — the definitions of the
// BasicCircuitBreaker members declared in circuit_breaker.h. Not part of the public
// API; circuit_breaker.h includes it at its end (templates need their definitions
// visible). The contract of each member is documented at its declaration.

#ifndef BULWARK_DETAIL_CIRCUIT_BREAKER_IMPL_H_
#define BULWARK_DETAIL_CIRCUIT_BREAKER_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "bulwark/circuit_breaker.h"

namespace bulwark {

template <Clock C, class Window>
template <class F, class Classify>
auto BasicCircuitBreaker<C, Window>::execute(F&& f, Classify&& classify)
    -> Expected<std::invoke_result_t<F&>, Rejection> {
  using R = std::invoke_result_t<F&>;
  auto permit = try_acquire();
  if (!permit) return Unexpected(permit.error());
#if defined(__cpp_exceptions)
  try {
#endif
    if constexpr (std::is_void_v<R>) {
      std::invoke(f);
      permit->record(classify_value(classify));
      return {};
    } else {
      R result = std::invoke(f);
      permit->record(classify_value(classify, std::as_const(result)));
      return result;
    }
#if defined(__cpp_exceptions)
  } catch (...) {
    Outcome o = Outcome::failure;
    if constexpr (std::is_invocable_r_v<Outcome, Classify&, std::exception_ptr>) {
      try {
        o = classify(std::current_exception());
      } catch (...) {
        o = Outcome::failure;
      }
    }
    permit->record(o);
    throw;
  }
#endif
}

template <Clock C, class Window>
bool BasicCircuitBreaker<C, Window>::adopt_open(Nanos remaining) noexcept {
  Word w(word_.load(std::memory_order_acquire));
  for (;;) {
    const State from = static_cast<State>(w.state());
    if (w.pending() || (from != State::closed && from != State::open && from != State::half_open))
      return false;
    std::uint32_t reopens = from == State::closed ? 1 : std::max(w.reopens(), 1u);
    while (reopens < Word::kReopenMax && policy_->open_period(reopens) < to_ticks(remaining))
      ++reopens;
    const Word next = w.next_phase(static_cast<std::uint8_t>(State::open), reopens);
    // OPEN ends at since_ + open_period: start the period so that it ends when asked.
    const Ticks start =
        saturating_sub(saturating_add(now(), std::max<Ticks>(0, to_ticks(remaining))),
                       policy_->open_period(reopens));
    if (cas(w, next)) {
      publish(next, from, TransitionReason::fleet_opened, start);
      return true;
    }
  }
}

template <Clock C, class Window>
bool BasicCircuitBreaker<C, Window>::adopt_close() noexcept {
  Word w(word_.load(std::memory_order_acquire));
  for (;;) {
    const State from = static_cast<State>(w.state());
    if (w.pending() || (from != State::open && from != State::half_open)) return false;
    const Word next = w.next_phase(static_cast<std::uint8_t>(State::closed), w.reopens());
    const Ticks at = now();
    if (cas(w, next)) {
      publish(next, from, TransitionReason::fleet_closed, at);
      return true;
    }
  }
}

template <Clock C, class Window>
BreakerSnapshot BasicCircuitBreaker<C, Window>::snapshot() const noexcept {
  const Word w(word_.load(std::memory_order_acquire));
  const State s = static_cast<State>(w.state());
  const detail::PolicyCore& p = *policy_;
  const Ticks t = now();
  BreakerSnapshot snap{};
  snap.state = s;
  snap.time_in_state =
      Nanos(std::max<Ticks>(0, saturating_sub(t, since_.load(std::memory_order_relaxed))));
  snap.consecutive_failures =
      (s == State::closed || s == State::metrics_only) ? w.consecutive_failures() : 0;
  switch (s) {
    case State::open:
      snap.open_duration = Nanos(p.open_period(w.reopens()));
      break;
    case State::half_open:
      snap.open_duration = Nanos(p.open_period(std::min(w.reopens() + 1, Word::kReopenMax)));
      break;
    case State::closed:
      snap.open_duration = Nanos(p.open_period(flapping_trip(w, snap.time_in_state.count())
                                                   ? std::min(w.reopens() + 1, Word::kReopenMax)
                                                   : 1));
      break;
    case State::forced_open:
      // The next opening is a transition_to(open), which keeps the growth reached.
      snap.open_duration = Nanos(p.open_period(std::max(w.reopens(), 1u)));
      break;
    default:
      snap.open_duration = Nanos(p.open_period(1));
      break;
  }
  snap.reopens = (s == State::open || s == State::half_open) ? w.reopens() : 0;
  snap.half_open_in_flight = s == State::half_open ? w.probes_in_flight() : 0;
  snap.half_open_successes = s == State::half_open ? w.probe_successes() : 0;
  snap.generation = w.gen();
  const auto totals = detail::ledger_fold(totals_);
  snap.successes = totals[static_cast<std::size_t>(detail::Total::successes)];
  snap.failures = totals[static_cast<std::size_t>(detail::Total::failures)];
  snap.ignored = totals[static_cast<std::size_t>(detail::Total::ignored)];
  snap.rejected = totals[static_cast<std::size_t>(detail::Total::rejected)];
  const std::uint64_t cold = cold_.load(std::memory_order_relaxed);
  snap.cancelled = Cold::Cancelled::get(cold);
  snap.opens = Cold::Opens::get(cold);
  snap.permitted = snap.successes + snap.failures + snap.ignored + snap.cancelled;
  snap.flapping = Cold::Flapping::get(cold) && !(s == State::closed && p.flapping_period > 0 &&
                                                 snap.time_in_state >= Nanos(p.flapping_period));
  if constexpr (kWindowed) {
    if (s == State::closed || s == State::metrics_only) {
      const Verdict v = verdict(w.gen(), coarse_now());
      snap.window = v.counts;
      snap.failure_rate = v.failure_rate;
      snap.slow_call_rate = v.slow_call_rate;
    }
  }
  return snap;
}

template <Clock C, class Window>
Ticks BasicCircuitBreaker<C, Window>::admit_timed(Word w) noexcept {
  const detail::PolicyCore& p = *policy_;
  Ticks start = coarse_now();
  if constexpr (kWindowed) {
    if (p.window.track_in_flight) {
      const unsigned shift = p.window.epoch_shift;
      const auto adm = window_.in_flight().admit(
          w.gen(), detail::InFlight::epoch_of(start, shift),
          [this, shift] { return detail::InFlight::epoch_of(coarse_now(), shift); });
      start = std::max(start, detail::InFlight::epoch_start(adm.epoch, shift));
      if (adm.new_epoch) evaluate(w.gen(), start);
    }
  }
  return start;
}

template <Clock C, class Window>
auto BasicCircuitBreaker<C, Window>::refuse(RejectReason reason, Ticks retry_after) noexcept
    -> Decision {
  count(detail::Total::rejected);
  if (!policy_->rejection_listeners.empty()) [[unlikely]] {
    policy_->rejection_listeners.emit(
        RejectionEvent{name(), this, reason, Nanos(retry_after), now()});
  }
  return {kRejected | (std::uint64_t{static_cast<std::uint8_t>(reason)} << 8), retry_after};
}

template <Clock C, class Window>
auto BasicCircuitBreaker<C, Window>::acquire_slow(Word w) noexcept -> Decision {
  double draw = -1;  // fraction mode: one draw per request, however often we loop
  for (;;) {
    switch (static_cast<State>(w.state())) {
      case State::closed:
      case State::metrics_only:
        if constexpr (kWindowed) {
          if (policy_->slow_call_duration > 0) return admit(w, admit_timed(w));
        }
        return admit(w, 0);
      case State::disabled:
        return admit(w, 0);
      case State::forced_open:
        return refuse(RejectReason::forced_open, kTicksMax);
      case State::open: {
        const Ticks period = policy_->open_period(w.reopens());
        // The winner of the last transition is still publishing it: its time is
        // not known yet, so it certainly has not elapsed.
        if (w.pending()) return refuse(RejectReason::open, period);
        const Ticks since = since_.load(std::memory_order_relaxed);
        const Ticks until = saturating_add(since, period);
        // An end that saturates (an infinite open period) never comes by itself. A
        // clock that stepped back before the opening is no time passing: the rest of
        // the period is then the whole period, never more. The coarse clock (never
        // ahead of the precise one) answers the common case; the precise one confirms
        // an end, so no probe is admitted early and none later than one coarse tick.
        Ticks t = coarse_now();
        if (t >= until && until != kTicksMax) t = now();
        if (t < until || until == kTicksMax)
          return refuse(RejectReason::open, until - std::clamp(t, since, until));
        const Word next = w.next_phase(static_cast<std::uint8_t>(State::half_open), w.reopens())
                              .with_probes_in_flight(1);
        if (cas(w, next)) {
          publish(next, State::open, TransitionReason::open_period_elapsed, t);
          return admit(next, probe_start());
        }
        break;  // someone else moved the breaker first: look again
      }
      case State::half_open: {
        const detail::PolicyCore& p = *policy_;
        if (p.fraction_mode()) {
          if (draw < 0) draw = p.draw();
          if (draw >= p.stage_fraction(w.stage()))
            return refuse(RejectReason::half_open_throttled, half_open_wait(w));
        }
        if (w.probes_in_flight() < p.half_open_max_calls) {
          const Word next = w.with_probes_in_flight(w.probes_in_flight() + 1);
          if (cas(w, next)) return admit(next, probe_start());
          break;
        }
        // Every slot is taken. A probe whose permit leaked would hold its slot
        // forever; after half_open_max_wait we start a fresh round instead. The
        // round keeps the successes and ramp stage already earned, so a dependency
        // that answers slowly but well still closes the breaker: each round adds
        // at least one success as long as a probe takes less than the wait.
        if (p.half_open_max_wait <= 0 || w.pending())
          return refuse(RejectReason::half_open_full, half_open_wait(w));
        const Ticks t = now();
        // A clock that stepped back is no time passing (never a wait above the maximum).
        const Ticks waited =
            std::max<Ticks>(0, saturating_sub(t, since_.load(std::memory_order_relaxed)));
        if (waited < p.half_open_max_wait) {
          return refuse(RejectReason::half_open_full, p.half_open_max_wait - waited);
        }
        const Word next = w.next_phase(static_cast<std::uint8_t>(State::half_open), w.reopens())
                              .with_probes_in_flight(1)
                              .with_probe_successes(w.probe_successes())
                              .with_stage(w.stage());
        if (cas(w, next)) {
          publish(next, State::half_open, TransitionReason::open_period_elapsed, t);
          return admit(next, probe_start());
        }
        break;
      }
    }
  }
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::release(Word admitted, Resolution r, Nanos reported,
                                             Ticks start) noexcept {
  switch (r) {
    case Resolution::success:
      count(detail::Total::successes);
      break;
    case Resolution::failure:
      count(detail::Total::failures);
      break;
    case Resolution::ignored:
      count(detail::Total::ignored);
      break;
    case Resolution::cancelled:
      add_cold(1, 0);
      break;
  }
  const State s = static_cast<State>(admitted.state());
  if (s == State::disabled) return;  // records nothing
  const bool counted = r == Resolution::success || r == Resolution::failure;
  const bool recording = s == State::closed || s == State::metrics_only;
  if constexpr (kWindowed) {
    // Window words keep only the low bits of a generation (they are rewritten at
    // every transition, so they never lag by much), but a permit can be held across
    // any number of transitions: compare its full generation before it reaches the
    // window, or one admitted 4096 transitions ago would count as current.
    if (Word(word_.load(std::memory_order_acquire)).gen() != admitted.gen()) return;
    const detail::PolicyCore& p = *policy_;
    const bool timed = p.slow_call_duration > 0;
    Ticks t = 0;
    if (timed || (counted && recording && Window::kind == WindowKind::time)) t = coarse_now();
    if (timed && recording && p.window.track_in_flight) {
      window_.in_flight().complete(admitted.gen(),
                                   detail::InFlight::epoch_of(start, p.window.epoch_shift));
    }
    const Ticks took = reported > Nanos::zero()
                           ? reported.count()
                           : (timed ? std::max<Ticks>(0, saturating_sub(t, start)) : 0);
    const bool slow = timed && counted && took > p.slow_call_duration;
    if (recording) {
      // A call in flight for slow_call_duration or more may have counted among the
      // slow calls in flight (their epoch decides): its completion takes it out.
      const bool was_in_flight_slow =
          timed && p.window.track_in_flight && saturating_sub(t, start) >= p.slow_call_duration;
      if (counted) closed_outcome(admitted, r == Resolution::failure, slow, was_in_flight_slow, t);
    } else if (s == State::half_open) {
      probe_resolved(admitted, r, slow);
    }
  } else {
    (void)reported, (void)start;
    if (recording) {
      if (r == Resolution::success) {
        closed_success(admitted);
      } else if (r == Resolution::failure) {
        (void)closed_failure(admitted);
      }
    } else if (s == State::half_open) {
      probe_resolved(admitted, r, false);
    }
  }
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::closed_outcome(Word admitted, bool failure, bool slow,
                                                    bool was_in_flight_slow, Ticks t) noexcept {
  const detail::Recorded rec =
      window_.record(policy_->window, admitted.gen(), t, detail::make_sample(failure, slow));
  bool tripped = false;
  if (failure) {
    tripped = closed_failure(admitted);
  } else {
    closed_success(admitted);
  }
  // A success only lowers the rates, unless the volume was all a rule waited for, or
  // older outcomes just left the window (once per bucket: successes aging out can
  // leave the failures over the threshold), or calls in flight turned slow since the
  // rates were last judged (once per in-flight period: they turn slow as time passes,
  // with nothing else judging the rates), or this call counted among those slow calls
  // in flight (leaving their count shrinks the volume: with the outcome it evicts from
  // a full count window, the rates can rise).
  if (!tripped && (failure || slow || was_in_flight_slow || rec.head.armed() || rec.dropped ||
                   (policy_->window.track_in_flight &&
                    !window_.in_flight().checked(admitted.gen(), in_flight_period(t)))))
    evaluate(admitted.gen(), t);
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::closed_success(Word admitted) noexcept {
  Word w(word_.load(std::memory_order_acquire));
  // A success ends a run of consecutive failures. Only write when there is one:
  // the common case is a load and nothing else.
  while (w.gen() == admitted.gen() && w.consecutive_failures() != 0) {
    if (cas(w, w.with_consecutive_failures(0))) return;
  }
}

template <Clock C, class Window>
bool BasicCircuitBreaker<C, Window>::closed_failure(Word admitted) noexcept {
  const detail::PolicyCore& p = *policy_;
  Word w(word_.load(std::memory_order_acquire));
  for (;;) {
    if (w.gen() != admitted.gen()) return false;  // the breaker moved on: stale outcome
    const std::uint32_t failures = std::min(w.consecutive_failures() + 1, Word::kCountMax);
    Word next = w.with_consecutive_failures(failures);
    const bool trip = static_cast<State>(w.state()) == State::closed &&
                      p.consecutive_failures != 0 && failures >= p.consecutive_failures;
    Ticks at = 0;
    if (trip) {
      if (w.pending()) {
        next = with_request(next, Request::open);
      } else {
        at = now();
        next = w.next_phase(static_cast<std::uint8_t>(State::open), trip_reopens(w, at));
      }
    }
    if (cas(w, next)) {
      if (trip && !w.pending())
        publish(next, State::closed, TransitionReason::consecutive_failures, at);
      return trip;
    }
  }
}

template <Clock C, class Window>
auto BasicCircuitBreaker<C, Window>::verdict(std::uint32_t gen, Ticks t) const noexcept -> Verdict {
  Verdict v;
  if constexpr (kWindowed) {
    const detail::PolicyCore& p = *policy_;
    v.counts = window_.counts(p.window, gen, t);
    if (p.window.track_in_flight) {
      const unsigned shift = p.window.epoch_shift;
      v.counts.in_flight_slow = window_.in_flight().slow_calls(gen, t, p.slow_call_duration, shift);
    }
    const std::uint64_t total = v.counts.calls + v.counts.in_flight_slow;
    // Thresholds reconfigure() may change: each read once.
    const std::uint32_t minimum_calls = p.minimum_calls.load(std::memory_order_relaxed);
    const double failure_rate = p.failure_rate.load(std::memory_order_relaxed);
    const double slow_call_rate = p.slow_call_rate.load(std::memory_order_relaxed);
    const std::uint64_t minimum =
        Window::kind == WindowKind::count ? std::min(minimum_calls, p.window.size) : minimum_calls;
    if (total == 0) return v;
    const double fr = static_cast<double>(v.counts.failures) / static_cast<double>(total);
    const double sr =
        static_cast<double>(v.counts.slow() + v.counts.in_flight_slow) / static_cast<double>(total);
    const bool over_f = failure_rate > 0 && fr >= failure_rate;
    const bool over_s = slow_call_rate > 0 && sr >= slow_call_rate;
    if (total < minimum) {
      v.armed = over_f || over_s;
      return v;
    }
    v.failure_rate = fr;
    v.slow_call_rate = sr;
    if (over_f) {
      v.trip = Request::open_failure_rate;
    } else if (over_s) {
      v.trip = Request::open_slow_call_rate;
    }
  }
  (void)gen, (void)t;
  return v;
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::evaluate(std::uint32_t gen, Ticks t) noexcept {
  if constexpr (kWindowed) {
    Word w(word_.load(std::memory_order_acquire));
    const State s = static_cast<State>(w.state());
    if (w.gen() != gen || (s != State::closed && s != State::metrics_only)) return;
    if (policy_->window.track_in_flight) window_.in_flight().mark_checked(gen, in_flight_period(t));
    const Verdict v = verdict(gen, t);
    window_.set_armed(gen, v.armed);
    if (v.trip == Request::none || s != State::closed) return;  // METRICS_ONLY never rejects
    for (;;) {
      if (w.gen() != gen) return;
      const Ticks at = w.pending() ? 0 : now();
      const Word next =
          w.pending() ? with_request(w, v.trip)
                      : w.next_phase(static_cast<std::uint8_t>(State::open), trip_reopens(w, at));
      if (cas(w, next)) {
        if (!w.pending()) {
          publish(next, State::closed,
                  v.trip == Request::open_failure_rate ? TransitionReason::failure_rate
                                                       : TransitionReason::slow_call_rate,
                  at);
        }
        return;
      }
    }
  } else {
    (void)gen, (void)t;
  }
}

template <Clock C, class Window>
auto BasicCircuitBreaker<C, Window>::judge(const detail::PolicyCore& p,
                                           const detail::ProbeTally& t) noexcept -> Judgement {
  const std::uint32_t n = p.half_open_successes;
  const std::uint32_t rest = t.completed < n ? n - t.completed : 0;
  auto reaches = [n](double rate, std::uint32_t count) {
    return rate > 0 && static_cast<double>(count) / static_cast<double>(n) >= rate;
  };
  if (reaches(p.failure_rate, t.failures) || reaches(p.slow_call_rate, t.slow))
    return Judgement::reopen;
  if (reaches(p.failure_rate, t.failures + rest) || reaches(p.slow_call_rate, t.slow + rest))
    return Judgement::undecided;
  return Judgement::pass;
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::probe_resolved(Word admitted, Resolution r,
                                                    bool slow) noexcept {
  const detail::PolicyCore& p = *policy_;
  const bool counted = r == Resolution::success || r == Resolution::failure;
  const bool by_rate = p.failure_rate > 0 || p.slow_call_rate > 0;
  Judgement j = Judgement::undecided;
  if (counted && by_rate) {
    if constexpr (kWindowed) {
      const detail::ProbeTally t =
          window_.probe(admitted.gen(), admitted.stage(), r == Resolution::failure, slow);
      if (!t.stale) j = judge(p, t);
    }
  } else if (r == Resolution::failure) {
    j = Judgement::reopen;
  }
  (void)slow;
  Word w(word_.load(std::memory_order_acquire));
  for (;;) {
    if (w.gen() != admitted.gen()) return;  // that half-open round is over: frees nothing
    Word next = w.with_probes_in_flight(w.probes_in_flight() > 0 ? w.probes_in_flight() - 1 : 0);
    const bool this_stage = admitted.stage() == w.stage();
    Request wanted = Request::none;
    if (j == Judgement::reopen && (this_stage || !by_rate)) {
      wanted = Request::open;
    } else if (this_stage) {
      bool passed = by_rate && j == Judgement::pass;
      if (r == Resolution::success) {
        const std::uint32_t successes = std::min(w.probe_successes() + 1, Word::kSuccessMax);
        next = next.with_probe_successes(successes);
        if (!by_rate) passed = successes >= p.half_open_successes;
      }
      if (passed) {
        if (w.stage() < p.last_stage) {
          next = next.with_stage(w.stage() + 1).with_probe_successes(0);  // ramp up: more traffic
        } else {
          wanted = Request::close;
        }
      }
    }
    if (wanted != Request::none) {
      if (w.pending()) {
        next = with_request(next, wanted);
      } else if (wanted == Request::close) {
        next = w.next_phase(static_cast<std::uint8_t>(State::closed), w.reopens());
      } else {
        next = w.next_phase(static_cast<std::uint8_t>(State::open), w.reopens() + 1);
      }
    }
    if (cas(w, next)) {
      if (wanted != Request::none && !w.pending()) {
        publish(next, State::half_open,
                wanted == Request::close ? TransitionReason::probes_succeeded
                                         : TransitionReason::probe_failed,
                now());
      }
      return;
    }
  }
}

template <Clock C, class Window>
bool BasicCircuitBreaker<C, Window>::resolve_request(Word w, Request r, Ticks at, State& to,
                                                     std::uint32_t& next_reopens,
                                                     TransitionReason& reason) const noexcept {
  const State from = static_cast<State>(w.state());
  const std::uint32_t reopens = w.reopens();
  reason = TransitionReason::manual;
  switch (r) {
    case Request::none:
      return false;
    case Request::close:
      if (from != State::half_open) return false;
      // The breaker recovered: it remembers the growth it reached, which a flapping
      // reopening continues (trip_reopens).
      to = State::closed, next_reopens = reopens, reason = TransitionReason::probes_succeeded;
      return true;
    case Request::open:
    case Request::open_failure_rate:
    case Request::open_slow_call_rate:
      if (from == State::closed) {
        to = State::open, next_reopens = trip_reopens(w, at);
        reason = r == Request::open                ? TransitionReason::consecutive_failures
                 : r == Request::open_failure_rate ? TransitionReason::failure_rate
                                                   : TransitionReason::slow_call_rate;
        return true;
      }
      if (from == State::half_open && r == Request::open) {
        to = State::open, next_reopens = reopens + 1, reason = TransitionReason::probe_failed;
        return true;
      }
      return false;
    case Request::manual_reset:
      to = State::closed, next_reopens = 0;
      return true;
    case Request::manual_open:
      if (from == State::open) return false;
      to = State::open;
      next_reopens =
          (from == State::half_open || from == State::forced_open) ? std::max(reopens, 1u) : 1;
      return true;
    case Request::manual_half_open:
      if (from != State::open && from != State::forced_open) return false;
      to = State::half_open, next_reopens = std::max(reopens, 1u);
      return true;
    case Request::manual_forced_open:
      if (from == State::forced_open) return false;
      to = State::forced_open;
      next_reopens = (from == State::open || from == State::half_open) ? reopens : 0;
      return true;
    case Request::manual_disabled:
      if (from == State::disabled) return false;
      to = State::disabled, next_reopens = 0;
      return true;
    case Request::manual_metrics_only:
      if (from == State::metrics_only) return false;
      to = State::metrics_only, next_reopens = 0;
      return true;
  }
  return false;
}

template <Clock C, class Window>
Expected<void, TransitionError> BasicCircuitBreaker<C, Window>::manual(State target,
                                                                       Request req) noexcept {
  Word w(word_.load(std::memory_order_acquire));
  for (;;) {
    const State from = static_cast<State>(w.state());
    if (!manual_allowed(from, target)) return Unexpected(TransitionError{from, target});
    if (w.pending()) {
      // Someone is publishing a transition; they apply ours right after. Queue it
      // even if the breaker is already in `target`: it replaces whatever was queued
      // (the last operator action wins), and is dropped then if it changes nothing.
      if (cas(w, with_request(w, req))) return {};
      continue;
    }
    if (from == target && req != Request::manual_reset) return {};
    State to{};
    std::uint32_t reopens = 0;
    TransitionReason reason{};
    const Ticks at = now();
    if (!resolve_request(w, req, at, to, reopens, reason)) return {};
    const Word next = w.next_phase(static_cast<std::uint8_t>(to), reopens);
    if (cas(w, next)) {
      publish(next, from, reason, at);
      return {};
    }
  }
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::publish(Word w, State from, TransitionReason reason,
                                             Ticks at) noexcept {
  for (;;) {
    const State to = static_cast<State>(w.state());
    const Ticks previous_since = since_.load(std::memory_order_relaxed);
    since_.store(at, std::memory_order_relaxed);
    if constexpr (kWindowed) {
      // Every window word starts the new phase now, so that none of them can lag the
      // breaker's generation by enough for its shortened generation to wrap.
      const detail::Phase phase =
          (to == State::closed || to == State::metrics_only) ? detail::Phase::recording
          : to == State::half_open
              ? (from == State::half_open ? detail::Phase::probing_carried : detail::Phase::probing)
              : detail::Phase::idle;
      window_.begin_phase(policy_->window, w.gen(), phase, coarse_now());
    }
    const bool opened = (to == State::open || to == State::forced_open) && from != State::open &&
                        from != State::forced_open;
    // An automatic trip from CLOSED sets or clears the flapping flag: a trip that
    // continued the growth (trip_reopens) came within flapping_period of a recovery.
    // A reset clears it, and so does leaving CLOSED after it lasted flapping_period
    // (the flapping was over then, as the snapshot already said). Everything else
    // leaves it: a failed probe does not end the flapping.
    const bool trip =
        from == State::closed && to == State::open && reason != TransitionReason::manual;
    const bool ended = (to == State::closed && reason == TransitionReason::manual) ||
                       (from == State::closed && policy_->flapping_period > 0 &&
                        saturating_sub(at, previous_since) >= policy_->flapping_period);
    const bool was_flapping = Cold::Flapping::get(cold_.load(std::memory_order_relaxed));
    const bool flapping = trip ? w.reopens() > 1 : was_flapping && !ended;
    if (opened || trip || flapping != was_flapping)
      add_cold(0, opened ? 1 : 0,
               flapping != was_flapping || trip ? std::optional<bool>(flapping) : std::nullopt);
    if (from != to && !policy_->listeners.empty()) {
      const Nanos open_for =
          to == State::open ? Nanos(policy_->open_period(w.reopens())) : Nanos::zero();
      // Only an automatic opening is flapping (a manual one starts no growth).
      policy_->listeners.emit(
          TransitionEvent{name(), this, from, to, reason, at, w.gen(),
                          opened && flapping && reason != TransitionReason::manual, open_for});
    }
    // Clear pending, or take the next requested transition.
    Word cur(word_.load(std::memory_order_acquire));
    for (;;) {
      const Request req = cur.request();
      if (req == Request::none) {
        if (cas(cur, cur.with_pending(false))) return;
        continue;
      }
      State next_state{};
      std::uint32_t reopens = 0;
      const Ticks t = now();
      if (!resolve_request(cur, req, t, next_state, reopens, reason)) {
        cas(cur, cur.with_request(Request::none));
        continue;
      }
      const Word next = cur.next_phase(static_cast<std::uint8_t>(next_state), reopens);
      if (cas(cur, next)) {
        from = static_cast<State>(cur.state());
        w = next;
        at = t;
        break;
      }
    }
  }
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::add_cold(std::uint64_t cancelled, std::uint64_t opens,
                                              std::optional<bool> flapping) noexcept {
  std::uint64_t cur = cold_.load(std::memory_order_relaxed);
  for (;;) {
    std::uint64_t next = Cold::Cancelled::set_saturated(cur, Cold::Cancelled::get(cur) + cancelled);
    next = Cold::Opens::set_saturated(next, Cold::Opens::get(next) + opens);
    if (flapping) next = Cold::Flapping::set(next, *flapping);
    if (cold_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) return;
  }
}

template <Clock C, class Window>
bool BasicCircuitBreaker<C, Window>::flapping_trip(Word w, Ticks t_or_age,
                                                   bool age) const noexcept {
  const detail::PolicyCore& p = *policy_;
  if (p.flapping_period <= 0 || w.reopens() == 0) return false;
  if (w.pending()) return true;
  const Ticks in_state =
      age ? t_or_age : saturating_sub(t_or_age, since_.load(std::memory_order_relaxed));
  return in_state < p.flapping_period;
}

template <Clock C, class Window>
template <class Classify, class... Args>
Outcome BasicCircuitBreaker<C, Window>::classify_value(Classify& classify,
                                                       const Args&... args) noexcept {
  if constexpr (std::is_invocable_r_v<Outcome, Classify&, const Args&...>) {
#if defined(__cpp_exceptions)
    try {
      return classify(args...);
    } catch (...) {
      return Outcome::failure;  // a classifier that throws: the call counts as failed
    }
#else
    return classify(args...);
#endif
  } else {
    // Only a classifier of exceptions may decline to look at results: one that
    // takes the wrong type would otherwise make every result a success, silently.
    static_assert(std::is_invocable_r_v<Outcome, Classify&, std::exception_ptr>,
                  "the classifier can't be called with the call's result: make it take "
                  "`const R&` (or nothing, for a void call) and return bulwark::Outcome");
    return Outcome::success;
  }
}

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::PermitTraits::abandon(BasicCircuitBreaker& b,
                                                           const Data& d) noexcept {
  b.release(Word(d.word), Resolution::cancelled, Nanos::zero(), d.start);
}

}  // namespace bulwark

#endif  // BULWARK_DETAIL_CIRCUIT_BREAKER_IMPL_H_
