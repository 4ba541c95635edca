// bulwark/circuit_breaker.h — a lazy, lock-free circuit breaker.
//
// A circuit breaker stops calling a dependency that keeps failing, so the caller fails
// fast instead of waiting on it and the dependency gets room to recover. This one
// never runs anything by itself: no thread, timer or task. OPEN remembers when it
// opened; the first request after the open period wins a compare-and-swap to
// HALF_OPEN and becomes the probe (seed 000). Recovery is therefore detected on the
// request path, which costs nothing while nobody calls, and tests drive it with a
// ManualClock instead of sleeping.
//
//   bulwark::CircuitBreaker breaker({.name = "inventory", .consecutive_failures = 5});
//
//   if (auto permit = breaker.try_acquire()) {
//     auto result = call_inventory();
//     permit->record(result.ok() ? bulwark::Outcome::success : bulwark::Outcome::failure);
//   } else {
//     respond_503(permit.error().retry_after);    // why, and when to try again
//   }
//
//   // or, with exceptions meaning failure:
//   bulwark::Expected<Stock, bulwark::Rejection> stock = breaker.execute(call_inventory);
//
// Cost. A call admitted while CLOSED reads one atomic word to be admitted and adds
// one to a counter when it reports: no lock, no allocation, no clock read, no virtual
// call. A rejection while OPEN reads the clock once (that is how recovery is noticed
// without a timer). Transitions are single CAS races with exactly one winner.
// sizeof(CircuitBreaker) is one cache line (64 bytes); the configuration, clock and
// listeners live in a BreakerPolicy that any number of breakers can share.
//
// Thread-safety: every member function may be called concurrently from any thread.
// A Permit belongs to one call; move it, don't share it.
//
// Error model. A rejection is a normal, frequent outcome during an incident, so it is
// a value (Expected<Permit, Rejection>), not an exception: the core builds and works
// with -fno-exceptions. Exceptions thrown by the user's callable in execute() are the
// user's: they are counted as failures and propagate unchanged.

#ifndef BULWARK_CIRCUIT_BREAKER_H_
#define BULWARK_CIRCUIT_BREAKER_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "bulwark/breaker_config.h"
#include "bulwark/breaker_events.h"
#include "bulwark/clock.h"
#include "bulwark/detail/breaker_word.h"
#include "bulwark/expected.h"
#include "bulwark/outcome.h"

namespace bulwark {

// Why try_acquire() said no.
enum class RejectReason : std::uint8_t {
  open,            // the breaker is OPEN and its open period has not elapsed
  half_open_full,  // HALF_OPEN, and every probe slot is taken
  forced_open,     // an operator forced the breaker open
};

constexpr std::string_view to_string(RejectReason r) noexcept {
  switch (r) {
    case RejectReason::open:
      return "open";
    case RejectReason::half_open_full:
      return "half_open_full";
    case RejectReason::forced_open:
      return "forced_open";
  }
  return "unknown";
}

struct Rejection {
  RejectReason reason;
  // How long until a probe may be admitted (Polly's RetryAfter), for a Retry-After
  // header or a client's backoff. OPEN: the rest of the open period. HALF_OPEN: until
  // the half-open max wait frees the probe slots (or one open period if it is off).
  // FORCED_OPEN: Nanos::max(), as nothing will reopen it by itself.
  Nanos retry_after;
};

// A transition that transition_to() refused because it makes no sense from the
// breaker's current state (e.g. CLOSED -> HALF_OPEN). Nothing was changed.
struct TransitionError {
  State from;
  State to;
};

// A consistent-enough view of a breaker, for metrics and tests. Reading it changes
// nothing. Each field is read atomically; fields are not read as one snapshot, so
// under concurrent traffic they may disagree by the calls in between.
struct BreakerSnapshot {
  State state;
  Nanos time_in_state;
  std::uint32_t consecutive_failures;  // CLOSED and METRICS_ONLY; otherwise 0
  // OPEN: the current open period. Otherwise: how long the next opening would last.
  Nanos open_duration;
  std::uint32_t half_open_in_flight;  // HALF_OPEN: probes admitted and not yet resolved
  std::uint32_t half_open_successes;  // HALF_OPEN: probe successes so far this round
  std::uint32_t generation;           // +1 on every transition (wraps at 2^19)

  // Monotonic totals since the breaker was built.
  // A call admitted while CLOSED writes nothing shared until it resolves (that is what
  // keeps the closed path at one atomic add), so `permitted` counts resolved permits —
  // successes + failures + ignored + cancelled — plus half-open probes in flight.
  std::uint64_t permitted;
  std::uint64_t rejected;
  std::uint64_t successes;
  std::uint64_t failures;
  std::uint64_t ignored;
  std::uint64_t cancelled;  // permits destroyed without an outcome; saturates at 2^40-1
  std::uint64_t opens;      // transitions into OPEN or FORCED_OPEN; saturates at 2^24-1
};

namespace detail {

// The validated, precomputed part of a policy that does not depend on the clock.
struct PolicyCore {
  explicit PolicyCore(BreakerConfig config);  // raises InvalidConfig
  PolicyCore(const PolicyCore&) = delete;
  PolicyCore& operator=(const PolicyCore&) = delete;

  // open_period[r]: how long the r-th consecutive opening lasts (r >= 1), already
  // multiplied and capped; [0] equals [1].
  Ticks open_period(std::uint32_t reopens) const noexcept { return open_periods_[reopens]; }

  std::atomic<std::uint32_t> refs{1};
  const BreakerConfig config;
  const std::uint32_t consecutive_failures;
  const std::uint32_t half_open_max_calls;
  const std::uint32_t half_open_successes;
  const Ticks half_open_max_wait;
  ListenerList listeners;

 private:
  std::array<Ticks, Word::kReopenMax + 1> open_periods_{};
};

template <Clock C>
struct PolicyData : PolicyCore {
  PolicyData(BreakerConfig cfg, ClockRef<C> clk) : PolicyCore(std::move(cfg)), clock(clk) {}
  const ClockRef<C> clock;
};

}  // namespace detail

// A validated breaker configuration together with its clock and listeners: what many
// breakers (one per host, per operation, per partition) can share. Copying a policy
// shares it (a reference count); it is immutable except for its listener list.
// Thread-safe.
template <Clock C = SteadyClock>
class BreakerPolicy {
 public:
  // Validates `config` (throws InvalidConfig naming the field). Clocks with state
  // (ManualClock) must be passed and must outlive every breaker using the policy.
  explicit BreakerPolicy(BreakerConfig config) requires std::is_empty_v<C>
      : data_(new detail::PolicyData<C>(std::move(config), detail::ClockRef<C>())) {}
  BreakerPolicy(BreakerConfig config, const C& clock)
      : data_(new detail::PolicyData<C>(std::move(config), detail::ClockRef<C>(clock))) {}
  BreakerPolicy(BreakerConfig, const C&&) = delete;  // the clock must outlive the policy

  BreakerPolicy(const BreakerPolicy& other) noexcept : data_(other.data_) { retain(); }
  BreakerPolicy& operator=(BreakerPolicy other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~BreakerPolicy() { release(data_); }

  const BreakerConfig& config() const noexcept { return data_->config; }

  // Adds a listener for every breaker built from this policy; see breaker_events.h.
  ListenerId on_transition(TransitionListener listener) {
    return data_->listeners.add(std::move(listener));
  }
  // Removes it; returns false if it was not there. A listener already running finishes.
  bool remove_listener(ListenerId id) { return data_->listeners.remove(id); }

 private:
  template <Clock>
  friend class BasicCircuitBreaker;

  explicit BreakerPolicy(detail::PolicyData<C>* data) noexcept : data_(data) { retain(); }
  void retain() noexcept { data_->refs.fetch_add(1, std::memory_order_relaxed); }
  static void release(detail::PolicyData<C>* d) noexcept {
    if (d != nullptr && d->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete d;
  }

  detail::PolicyData<C>* data_;
};

template <Clock C = SteadyClock>
class alignas(64) BasicCircuitBreaker {
  using Word = detail::Word;
  using Request = detail::Request;

 public:
  using clock_type = C;

  // The right to make one call. Move-only. Report its outcome once with record();
  // destroying it without an outcome (an exception, a cancelled call) counts as
  // cancelled: it frees its half-open slot and counts as neither success nor failure.
  // An outcome reported after the breaker moved on (a call admitted while CLOSED that
  // completes after the breaker opened, or after a reset) changes nothing in the new
  // generation and frees no slot there; it still counts in the totals.
  class [[nodiscard]] Permit {
   public:
    Permit(Permit&& other) noexcept
        : breaker_(std::exchange(other.breaker_, nullptr)), word_(other.word_) {}
    Permit& operator=(Permit&& other) noexcept {
      if (this != &other) {
        resolve(Resolution::cancelled);
        breaker_ = std::exchange(other.breaker_, nullptr);
        word_ = other.word_;
      }
      return *this;
    }
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;
    ~Permit() { resolve(Resolution::cancelled); }

    // Reports the call's outcome. `duration` is how long the call took (used by
    // slow-call rules and metrics; may be left zero by callers that don't time).
    // Only the first report of a permit counts.
    void record(Outcome outcome, Nanos duration = Nanos::zero()) noexcept {
      (void)duration;
      resolve(static_cast<Resolution>(outcome));
    }
    void record_success(Nanos duration = Nanos::zero()) noexcept {
      record(Outcome::success, duration);
    }
    void record_failure(Nanos duration = Nanos::zero()) noexcept {
      record(Outcome::failure, duration);
    }
    void ignore() noexcept { record(Outcome::ignored); }

    // True while the permit has not reported.
    bool active() const noexcept { return breaker_ != nullptr; }
    // True if this call is a HALF_OPEN probe.
    bool is_probe() const noexcept {
      return static_cast<State>(Word(word_).state()) == State::half_open;
    }
    // The state the call was admitted in.
    State admitted_in() const noexcept { return static_cast<State>(Word(word_).state()); }
    // The breaker generation it was admitted in (see BreakerSnapshot::generation).
    std::uint32_t generation() const noexcept { return Word(word_).gen(); }

   private:
    friend class BasicCircuitBreaker;
    Permit(BasicCircuitBreaker* breaker, Word word) noexcept
        : breaker_(breaker), word_(word.raw()) {}

    void resolve(typename BasicCircuitBreaker::Resolution r) noexcept {
      if (breaker_ != nullptr) std::exchange(breaker_, nullptr)->release(Word(word_), r);
    }

    BasicCircuitBreaker* breaker_;
    std::uint64_t word_;
  };

  // Builds a breaker with its own policy. Throws InvalidConfig if `config` is invalid.
  explicit BasicCircuitBreaker(BreakerConfig config) requires std::is_empty_v<C>
      : BasicCircuitBreaker(BreakerPolicy<C>(std::move(config))) {}
  BasicCircuitBreaker(BreakerConfig config, const C& clock)
      : BasicCircuitBreaker(BreakerPolicy<C>(std::move(config), clock)) {}
  BasicCircuitBreaker(BreakerConfig, const C&&) = delete;

  // Builds a breaker that shares `policy` (and its listeners) with others.
  explicit BasicCircuitBreaker(const BreakerPolicy<C>& policy) noexcept : policy_(policy.data_) {
    policy_->refs.fetch_add(1, std::memory_order_relaxed);
    since_.store(now(), std::memory_order_relaxed);
  }

  BasicCircuitBreaker(const BasicCircuitBreaker&) = delete;
  BasicCircuitBreaker& operator=(const BasicCircuitBreaker&) = delete;
  ~BasicCircuitBreaker() { BreakerPolicy<C>::release(policy_); }

  // Asks to make one call. Never blocks, never throws, never allocates.
  // CLOSED / METRICS_ONLY / DISABLED: admitted (one atomic load).
  // OPEN: rejected until the open period has elapsed; then the first caller wins the
  //   transition to HALF_OPEN and is admitted as the probe.
  // HALF_OPEN: admitted while fewer than half_open_max_calls probes are in flight.
  // FORCED_OPEN: rejected.
  Expected<Permit, Rejection> try_acquire() noexcept {
    Word w(word_.load(std::memory_order_acquire));
    for (;;) {
      switch (static_cast<State>(w.state())) {
        case State::closed:
        case State::metrics_only:
        case State::disabled:
          return Permit(this, w);
        case State::forced_open:
          return reject(RejectReason::forced_open, kTicksMax);
        case State::open: {
          const Ticks period = policy_->open_period(w.reopens());
          // The winner of the last transition is still publishing it: its time is
          // not known yet, so it certainly has not elapsed.
          if (w.pending()) return reject(RejectReason::open, period);
          const Ticks t = now();
          const Ticks until = saturating_add(since_.load(std::memory_order_relaxed), period);
          if (t < until) return reject(RejectReason::open, until - t);
          const Word next =
              w.next_phase(static_cast<std::uint8_t>(State::half_open), w.reopens()).with_a(1);
          if (cas(w, next)) {
            publish(next, State::open, TransitionReason::open_period_elapsed, t);
            return Permit(this, next);
          }
          break;  // someone else moved the breaker first: look again
        }
        case State::half_open: {
          const detail::PolicyCore& p = *policy_;
          if (w.a() < p.half_open_max_calls) {
            const Word next = w.with_a(w.a() + 1);
            if (cas(w, next)) return Permit(this, next);
            break;
          }
          // Every slot is taken. A probe whose permit leaked would hold its slot
          // forever; after half_open_max_wait we start a fresh round instead.
          if (p.half_open_max_wait <= 0)
            return reject(RejectReason::half_open_full, p.open_period(w.reopens()));
          if (w.pending()) return reject(RejectReason::half_open_full, p.half_open_max_wait);
          const Ticks t = now();
          const Ticks waited = saturating_sub(t, since_.load(std::memory_order_relaxed));
          if (waited < p.half_open_max_wait) {
            return reject(RejectReason::half_open_full, p.half_open_max_wait - waited);
          }
          const Word next =
              w.next_phase(static_cast<std::uint8_t>(State::half_open), w.reopens()).with_a(1);
          if (cas(w, next)) {
            publish(next, State::half_open, TransitionReason::open_period_elapsed, t);
            return Permit(this, next);
          }
          break;
        }
      }
    }
  }

  // Runs `f` if the breaker admits the call. Returns its result, or the rejection.
  // A return counts as a success; an exception counts as a failure and is rethrown.
  template <class F>
  auto execute(F&& f) -> Expected<std::invoke_result_t<F&>, Rejection> {
    using R = std::invoke_result_t<F&>;
    auto permit = try_acquire();
    if (!permit) return Unexpected(permit.error());
#if defined(__cpp_exceptions)
    try {
#endif
      if constexpr (std::is_void_v<R>) {
        std::invoke(f);
        permit->record(Outcome::success);
        return {};
      } else {
        R result = std::invoke(f);
        permit->record(Outcome::success);
        return result;
      }
#if defined(__cpp_exceptions)
    } catch (...) {
      permit->record(Outcome::failure);
      throw;
    }
#endif
  }

  // The current state. One atomic load.
  State state() const noexcept {
    return static_cast<State>(Word(word_.load(std::memory_order_acquire)).state());
  }

  std::string_view name() const noexcept { return policy_->config.name; }
  const BreakerConfig& config() const noexcept { return policy_->config; }
  BreakerPolicy<C> policy() const noexcept { return BreakerPolicy<C>(policy_); }

  // Manually moves the breaker to `target`:
  //   closed        from any state: like reset() (counters cleared, new generation)
  //   open          from any state but OPEN: opens for one open period
  //   half_open     from OPEN or FORCED_OPEN: starts probing now
  //   forced_open   rejects everything until the next manual transition
  //   disabled      admits everything, records nothing
  //   metrics_only  records outcomes (and would-trip rules), never rejects
  // Asking for the current state is a no-op. An impossible request (HALF_OPEN from
  // CLOSED, say) returns TransitionError and changes nothing. Emits an event.
  Expected<void, TransitionError> transition_to(State target) noexcept {
    return manual(target, request_for(target));
  }

  // Back to CLOSED from any state with a new generation: consecutive counts cleared,
  // and outcomes of permits admitted before the reset count nowhere. Emits an event
  // unless the breaker already was CLOSED.
  void reset() noexcept { (void)manual(State::closed, Request::manual_reset); }

  BreakerSnapshot snapshot() const noexcept {
    const Word w(word_.load(std::memory_order_acquire));
    const State s = static_cast<State>(w.state());
    const detail::PolicyCore& p = *policy_;
    BreakerSnapshot snap{};
    snap.state = s;
    snap.time_in_state =
        Nanos(std::max<Ticks>(0, saturating_sub(now(), since_.load(std::memory_order_relaxed))));
    snap.consecutive_failures = (s == State::closed || s == State::metrics_only) ? w.a() : 0;
    switch (s) {
      case State::open:
        snap.open_duration = Nanos(p.open_period(w.reopens()));
        break;
      case State::half_open:
        snap.open_duration = Nanos(p.open_period(std::min(w.reopens() + 1, Word::kReopenMax)));
        break;
      default:
        snap.open_duration = Nanos(p.open_period(1));
        break;
    }
    snap.half_open_in_flight = s == State::half_open ? w.a() : 0;
    snap.half_open_successes = s == State::half_open ? w.b() : 0;
    snap.generation = w.gen();
    snap.successes = successes_.load(std::memory_order_relaxed);
    snap.failures = failures_.load(std::memory_order_relaxed);
    snap.ignored = ignored_.load(std::memory_order_relaxed);
    snap.rejected = rejected_.load(std::memory_order_relaxed);
    const std::uint64_t cold = cold_.load(std::memory_order_relaxed);
    snap.cancelled = cold & kCancelledMax;
    snap.opens = cold >> kCancelledBits;
    snap.permitted =
        snap.successes + snap.failures + snap.ignored + snap.cancelled + snap.half_open_in_flight;
    return snap;
  }

 private:
  template <class>
  friend struct BreakerTestAccess;

  // How a permit ended. The first three mirror Outcome.
  enum class Resolution : std::uint8_t { success, failure, ignored, cancelled };
  static_assert(static_cast<int>(Resolution::success) == static_cast<int>(Outcome::success));
  static_assert(static_cast<int>(Resolution::failure) == static_cast<int>(Outcome::failure));
  static_assert(static_cast<int>(Resolution::ignored) == static_cast<int>(Outcome::ignored));

  static constexpr unsigned kCancelledBits = 40;
  static constexpr std::uint64_t kCancelledMax = (std::uint64_t{1} << kCancelledBits) - 1;
  static constexpr std::uint64_t kOpensMax = (std::uint64_t{1} << (64 - kCancelledBits)) - 1;

  Ticks now() const noexcept { return now_ticks(policy_->clock.get()); }

  bool cas(Word& expected, Word desired) noexcept {
    std::uint64_t raw = expected.raw();
    const bool ok = word_.compare_exchange_weak(raw, desired.raw(), std::memory_order_acq_rel,
                                                std::memory_order_acquire);
    expected = Word(raw);
    return ok;
  }

  Unexpected<Rejection> reject(RejectReason reason, Ticks retry_after) noexcept {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return Unexpected(Rejection{reason, Nanos(retry_after)});
  }

  // Adds a request to a word whose transition is still being published, unless a
  // request that takes precedence is already there.
  static Word with_request(Word w, Request r) noexcept {
    return detail::request_priority(r) >= detail::request_priority(w.request()) ? w.with_request(r)
                                                                                : w;
  }

  void release(Word admitted, Resolution r) noexcept {
    switch (r) {
      case Resolution::success:
        successes_.fetch_add(1, std::memory_order_relaxed);
        break;
      case Resolution::failure:
        failures_.fetch_add(1, std::memory_order_relaxed);
        break;
      case Resolution::ignored:
        ignored_.fetch_add(1, std::memory_order_relaxed);
        break;
      case Resolution::cancelled:
        add_cold(1, 0);
        break;
    }
    switch (static_cast<State>(admitted.state())) {
      case State::closed:
      case State::metrics_only:
        if (r == Resolution::success) {
          closed_success(admitted);
        } else if (r == Resolution::failure) {
          closed_failure(admitted);
        }
        break;
      case State::half_open:
        probe_resolved(admitted, r);
        break;
      default:  // DISABLED records nothing; no permit is admitted while open
        break;
    }
  }

  void closed_success(Word admitted) noexcept {
    Word w(word_.load(std::memory_order_acquire));
    // A success ends a run of consecutive failures. Only write when there is one:
    // the common case is a load and nothing else.
    while (w.gen() == admitted.gen() && w.a() != 0) {
      if (cas(w, w.with_a(0))) return;
    }
  }

  void closed_failure(Word admitted) noexcept {
    const detail::PolicyCore& p = *policy_;
    Word w(word_.load(std::memory_order_acquire));
    for (;;) {
      if (w.gen() != admitted.gen()) return;  // the breaker moved on: stale outcome
      const std::uint32_t failures = std::min(w.a() + 1, Word::kCountMax);
      Word next = w.with_a(failures);
      const bool trip = static_cast<State>(w.state()) == State::closed &&
                        p.consecutive_failures != 0 && failures >= p.consecutive_failures;
      if (trip) {
        next = w.pending() ? with_request(next, Request::open)
                           : w.next_phase(static_cast<std::uint8_t>(State::open), 1);
      }
      if (cas(w, next)) {
        if (trip && !w.pending())
          publish(next, State::closed, TransitionReason::consecutive_failures, now());
        return;
      }
    }
  }

  void probe_resolved(Word admitted, Resolution r) noexcept {
    const detail::PolicyCore& p = *policy_;
    Word w(word_.load(std::memory_order_acquire));
    for (;;) {
      if (w.gen() != admitted.gen()) return;  // that half-open round is over: frees nothing
      Word next = w.with_a(w.a() > 0 ? w.a() - 1 : 0);
      Request wanted = Request::none;
      if (r == Resolution::success) {
        next = next.with_b(std::min(w.b() + 1, Word::kCountMax));
        if (next.b() >= p.half_open_successes) wanted = Request::close;
      } else if (r == Resolution::failure) {
        wanted = Request::open;
      }
      if (wanted != Request::none) {
        if (w.pending()) {
          next = with_request(next, wanted);
        } else if (wanted == Request::close) {
          next = w.next_phase(static_cast<std::uint8_t>(State::closed), 0);
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

  static constexpr Request request_for(State target) noexcept {
    switch (target) {
      case State::closed:
        return Request::manual_reset;
      case State::open:
        return Request::manual_open;
      case State::half_open:
        return Request::manual_half_open;
      case State::forced_open:
        return Request::manual_forced_open;
      case State::disabled:
        return Request::manual_disabled;
      case State::metrics_only:
        return Request::manual_metrics_only;
    }
    return Request::none;
  }

  // Where a request leads from state `from`, or false if it makes no sense there
  // (any more). A reset leads to CLOSED even from CLOSED (a new generation).
  static bool resolve_request(State from, Request r, std::uint32_t reopens, State& to,
                              std::uint32_t& next_reopens, TransitionReason& reason) noexcept {
    reason = TransitionReason::manual;
    switch (r) {
      case Request::none:
        return false;
      case Request::close:
        if (from != State::half_open) return false;
        to = State::closed, next_reopens = 0, reason = TransitionReason::probes_succeeded;
        return true;
      case Request::open:
        if (from == State::closed) {
          to = State::open, next_reopens = 1, reason = TransitionReason::consecutive_failures;
          return true;
        }
        if (from == State::half_open) {
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
        to = State::forced_open, next_reopens = reopens;
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

  static bool manual_allowed(State from, State to) noexcept {
    return to != State::half_open || from == State::open || from == State::forced_open ||
           from == State::half_open;
  }

  Expected<void, TransitionError> manual(State target, Request req) noexcept {
    Word w(word_.load(std::memory_order_acquire));
    for (;;) {
      const State from = static_cast<State>(w.state());
      if (!manual_allowed(from, target)) return Unexpected(TransitionError{from, target});
      if (from == target && req != Request::manual_reset) return {};
      if (w.pending()) {
        // Someone is publishing a transition; they will apply ours right after.
        if (cas(w, with_request(w, req))) return {};
        continue;
      }
      State to{};
      std::uint32_t reopens = 0;
      TransitionReason reason{};
      if (!resolve_request(from, req, w.reopens(), to, reopens, reason)) return {};
      const Word next = w.next_phase(static_cast<std::uint8_t>(to), reopens);
      if (cas(w, next)) {
        publish(next, from, reason, now());
        return {};
      }
    }
  }

  // Called by the thread whose CAS produced `w` (so `w` is pending): records when the
  // transition happened, announces it, then clears `pending` — first applying, one
  // at a time and in order, any transition requested in the meantime. While pending
  // is set nobody else can transition, so this thread alone writes since_ and events
  // are delivered strictly in order, and nobody ever waits for it.
  void publish(Word w, State from, TransitionReason reason, Ticks at) noexcept {
    for (;;) {
      const State to = static_cast<State>(w.state());
      since_.store(at, std::memory_order_relaxed);
      const bool opened = (to == State::open || to == State::forced_open) && from != State::open &&
                          from != State::forced_open;
      if (opened) add_cold(0, 1);
      if (from != to && !policy_->listeners.empty()) {
        policy_->listeners.emit(TransitionEvent{name(), this, from, to, reason, at, w.gen()});
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
        if (!resolve_request(static_cast<State>(cur.state()), req, cur.reopens(), next_state,
                             reopens, reason)) {
          cas(cur, cur.with_request(Request::none));
          continue;
        }
        const Word next = cur.next_phase(static_cast<std::uint8_t>(next_state), reopens);
        if (cas(cur, next)) {
          from = static_cast<State>(cur.state());
          w = next;
          at = now();
          break;
        }
      }
    }
  }

  // Saturating add to the [cancelled | opens] word. Both are rare events.
  void add_cold(std::uint64_t cancelled, std::uint64_t opens) noexcept {
    std::uint64_t cur = cold_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t c = std::min(kCancelledMax, (cur & kCancelledMax) + cancelled);
      const std::uint64_t o = std::min(kOpensMax, (cur >> kCancelledBits) + opens);
      if (cold_.compare_exchange_weak(cur, c | (o << kCancelledBits), std::memory_order_relaxed))
        return;
    }
  }

  std::atomic<std::uint64_t> word_{
      Word().with_state(static_cast<std::uint8_t>(State::closed)).raw()};
  std::atomic<Ticks> since_{0};  // when the current state began; written only while pending
  detail::PolicyData<C>* policy_;
  std::atomic<std::uint64_t> successes_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> ignored_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> cold_{0};  // cancelled (low 40 bits) | opens (high 24 bits)
};

using CircuitBreaker = BasicCircuitBreaker<SteadyClock>;

static_assert(sizeof(CircuitBreaker) <= 64, "a breaker must fit one cache line");

}  // namespace bulwark

#endif  // BULWARK_CIRCUIT_BREAKER_H_
