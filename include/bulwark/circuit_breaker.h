// bulwark/circuit_breaker.h — a lazy, lock-free circuit breaker.
//
// A circuit breaker stops calling a dependency that keeps failing, so the caller fails
// fast and the dependency gets room to recover. It runs nothing by itself (no thread,
// timer or task): the first request after the open period moves it to HALF_OPEN and
// becomes the probe, so tests drive it with a ManualClock instead of sleeping.
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
// Types. The second template parameter is the sliding window (sliding_window.h), and
// it picks the configuration type (breaker_config.h):
//   CircuitBreaker      NoWindow, BreakerConfig: consecutive failures.
//   CountWindowBreaker  CountWindow, CountWindowConfig: rates over the last N calls.
//   TimeWindowBreaker   TimeWindow<10>, TimeWindowConfig: rates over the last T.
// Every breaker type names them: Breaker::Config, Breaker::Policy.
//
// Cost. A call admitted while CLOSED reads one atomic word to be admitted and adds
// one to a per-thread counter when it reports: no lock, no allocation, no clock read,
// no virtual call, no atomic read-modify-write. Totals are counted in the calling
// thread's ledger (detail/ledger.h): a success in CLOSED and a rejection while OPEN
// write nothing another core reads. A windowed call adds one atomic update (its
// bucket), plus a coarse clock read for a time window or when slowness is judged. A
// rejection while OPEN reads the coarse clock once (SteadyClock:
// CLOCK_MONOTONIC_COARSE); the precise clock confirms the open period's end, so a
// probe is never admitted early and at most one coarse tick (1-4 ms) late.
// Transitions are single CAS races with exactly one winner.
// sizeof(CircuitBreaker) is 64 bytes; the configuration, clock and listeners live in
// a BreakerPolicy that any number of breakers can share.
//
// Thread-safety: every member function may be called concurrently from any thread.
// A Permit belongs to one call; move it, don't share it.
//
// Errors. A rejection is a value (Expected<Permit, Rejection>), not an exception: the
// core builds and works with -fno-exceptions. Exceptions thrown by the user's callable
// in execute() are counted as failures and propagate unchanged.

#ifndef BULWARK_CIRCUIT_BREAKER_H_
#define BULWARK_CIRCUIT_BREAKER_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "bulwark/breaker_config.h"
#include "bulwark/breaker_events.h"
#include "bulwark/clock.h"
#include "bulwark/detail/breaker_word.h"
#include "bulwark/detail/ledger.h"
#include "bulwark/detail/permit_base.h"
#include "bulwark/expected.h"
#include "bulwark/outcome.h"
#include "bulwark/sliding_window.h"

namespace bulwark {

// Why try_acquire() refused a call, as a value (cheap to copy, no allocation).
struct Rejection {
  RejectReason reason;
  // How long until a probe may be admitted, for a Retry-After header or a client's
  // backoff. OPEN: the rest of the open period. HALF_OPEN (full or throttled): until
  // half_open.max_wait frees the probe slots (or one open period if it is off).
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
  // OPEN: the current open period. Otherwise: how long the next opening would last (in
  // CLOSED, longer than open_duration while a flapping trip would continue the growth;
  // in FORCED_OPEN, the period transition_to(open) would start, which keeps the growth
  // the breaker had reached when it was forced open).
  Nanos open_duration;
  // OPEN / HALF_OPEN: consecutive openings without a recovery in between, flapping
  // reopenings included (1 for a first opening); the open period grows with it.
  std::uint32_t reopens;
  std::uint32_t half_open_in_flight;  // HALF_OPEN: probes admitted and not yet resolved
  std::uint32_t half_open_successes;  // HALF_OPEN: probe successes so far this round
  std::uint32_t generation;           // +1 on every transition (wraps at 2^19)

  // Monotonic totals since the breaker was built, counting every call in every state
  // (DISABLED's calls too: "records nothing" means nothing reaches the trip rules).
  // A call admitted while CLOSED writes nothing when admitted, so `permitted` counts
  // permits once they resolve: successes + failures + ignored + cancelled. Calls still
  // in flight are not in it yet; that keeps it monotonic. The totals are counted in
  // per-thread ledgers (detail/ledger.h) and folded here: exact at rest, never lower
  // than a previous snapshot's. A snapshot costs one cell read per thread that counted.
  std::uint64_t permitted;
  std::uint64_t rejected;
  std::uint64_t successes;
  std::uint64_t failures;
  std::uint64_t ignored;
  std::uint64_t cancelled;  // permits destroyed without an outcome; saturates at 2^38-1
  std::uint64_t opens;      // transitions into OPEN or FORCED_OPEN; saturates at 2^24-1

  // Breakers with a sliding window: what it holds now (CLOSED / METRICS_ONLY), and the
  // rates the trip rules compare, with calls in flight longer than slow_call_duration
  // counted as slow calls. `window` is empty for breakers without one and outside
  // CLOSED / METRICS_ONLY (HALF_OPEN is judged by its probes: half_open_* above). With
  // `window` present, an empty rate means "not enough calls" (fewer than
  // minimum_calls); never a magic -1.
  std::optional<WindowCounts> window;
  std::optional<double> failure_rate;
  std::optional<double> slow_call_rate;
  // Reopened within flapping_period of recovering, and not yet closed for that long.
  bool flapping;
};

namespace detail {

// The validated, precomputed part of a policy that does not depend on the clock.
struct PolicyCore {
  // Validates `spec` (a time window's buckets against `bucket_capacity`); raises
  // InvalidConfig naming the field.
  PolicyCore(BreakerSpec spec, std::uint32_t bucket_capacity);
  PolicyCore(const PolicyCore&) = delete;
  PolicyCore& operator=(const PolicyCore&) = delete;

  // open_period[r]: how long the r-th consecutive opening lasts (r >= 1), already
  // multiplied and capped; [0] equals [1].
  Ticks open_period(std::uint32_t reopens) const noexcept { return open_periods_[reopens]; }

  // A uniform draw in [0, 1) for fraction-mode half-open.
  double draw() const noexcept;
  bool fraction_mode() const noexcept { return stage_fraction_[0] > 0; }
  double stage_fraction(std::uint32_t stage) const noexcept { return stage_fraction_[stage]; }

  std::atomic<std::uint32_t> refs{1};
  const BreakerSpec spec;
  const std::uint32_t consecutive_failures;
  const std::uint32_t half_open_max_calls;
  const std::uint32_t half_open_successes;
  const Ticks half_open_max_wait;
  const double failure_rate;    // < 0: rule off
  const double slow_call_rate;  // < 0: rule off
  const std::uint32_t minimum_calls;
  const Ticks slow_call_duration;  // 0: slowness not judged
  const Ticks flapping_period;
  const WindowParams window;
  std::uint32_t last_stage = 0;                   // fraction mode: index of the last ramp stage
  ListenerList<TransitionEvent> listeners{1, 2};  // odd ids
  ListenerList<RejectionEvent> rejection_listeners{2, 2};  // even ids

 private:
  std::array<Ticks, Word::kReopenMax + 1> open_periods_{};
  std::array<double, Word::kStageMax + 1> stage_fraction_{};
  mutable std::atomic<std::uint64_t> rng_;
};

template <class W>
constexpr std::uint32_t window_capacity() noexcept {
  if constexpr (W::kind == WindowKind::time) {
    return W::capacity;
  } else {
    return 0;
  }
}

// A policy's shared block: the core, the clock, and the configuration as given.
template <Clock C, class Config>
struct PolicyData : PolicyCore {
  PolicyData(Config cfg, ClockRef<C> clk, std::uint32_t bucket_capacity)
      : PolicyCore(spec_of(cfg), bucket_capacity), clock(clk), config(std::move(cfg)) {}
  const ClockRef<C> clock;
  const Config config;
};

// True for the breaker configuration types; the others are not mistaken for one.
template <class T>
inline constexpr bool is_breaker_config_v =
    std::is_same_v<T, BreakerConfig> || std::is_same_v<T, CountWindowConfig> ||
    std::is_same_v<T, TimeWindowConfig>;

}  // namespace detail

// A validated breaker configuration together with its clock and listeners: what many
// breakers (one per host, per operation, per partition) of one type can share. Window
// is the breakers' sliding window and picks the configuration type (Config). Copying
// a policy shares it (a reference count); it is immutable except for its listener
// list. Building one allocates its shared block once. Thread-safe.
template <Clock C = SteadyClock, class Window = NoWindow>
class BreakerPolicy {
 public:
  using Config = typename Window::config_type;

  // Validates `config` (throws InvalidConfig naming the field). Clocks with state
  // (ManualClock) must be passed and must outlive every breaker using the policy.
  explicit BreakerPolicy(Config config) requires std::is_empty_v<C>
      : data_(new Data(std::move(config), detail::ClockRef<C>(),
                       detail::window_capacity<Window>())) {}
  BreakerPolicy(Config config, const C& clock)
      : data_(new Data(std::move(config), detail::ClockRef<C>(clock),
                       detail::window_capacity<Window>())) {}
  BreakerPolicy(Config, const C&&) = delete;  // the clock must outlive the policy
  // Another kind of breaker's configuration does not compile.
  template <class Other, class... Rest>
  requires(detail::is_breaker_config_v<Other> &&
           !std::is_same_v<Other, Config>) explicit BreakerPolicy(const Other&, const Rest&...) {
    static_assert(sizeof(Other) == 0,
                  "each breaker kind takes its own configuration type: CircuitBreaker takes "
                  "BreakerConfig, CountWindowBreaker CountWindowConfig, TimeWindowBreaker "
                  "TimeWindowConfig (use Breaker::Config)");
  }

  BreakerPolicy(const BreakerPolicy& other) noexcept : data_(other.data_) { retain(); }
  BreakerPolicy& operator=(BreakerPolicy other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~BreakerPolicy() { release(data_); }

  // The configuration as given. No copy.
  const Config& config() const noexcept { return data_->config; }

  // Adds a listener for every breaker built from this policy; see breaker_events.h.
  ListenerId on_transition(TransitionListener listener) {
    return data_->listeners.add(std::move(listener));
  }
  // Adds a listener told of every rejection by a breaker built from this policy. It
  // runs on the rejected caller's thread, for every rejected request: keep it cheap.
  ListenerId on_rejection(RejectionListener listener) {
    return data_->rejection_listeners.add(std::move(listener));
  }

  // Removes a listener of either kind; returns false if it was not there. A listener
  // already running finishes.
  bool remove_listener(ListenerId id) {
    return data_->listeners.remove(id) || data_->rejection_listeners.remove(id);
  }

 private:
  template <Clock, class>
  friend class BasicCircuitBreaker;

  using Data = detail::PolicyData<C, Config>;
  explicit BreakerPolicy(Data* data) noexcept : data_(data) { retain(); }
  void retain() noexcept { data_->refs.fetch_add(1, std::memory_order_relaxed); }
  static void release(Data* d) noexcept {
    if (d != nullptr && d->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete d;
  }

  Data* data_;
};

template <Clock C = SteadyClock, class Window = NoWindow>
class alignas(64) BasicCircuitBreaker {
  using Word = detail::Word;
  using Request = detail::Request;
  static constexpr bool kWindowed = Window::kind != WindowKind::none;
  enum class Resolution : std::uint8_t;  // how a permit ended; defined below
  // What a Permit holds: the word it was admitted under and the call's start (when the
  // breaker judges slowness). Dropping it unreported cancels it.
  struct PermitTraits {
    using Owner = BasicCircuitBreaker;
    struct Data {
      std::uint64_t word;
      Ticks start;
    };
    static void abandon(BasicCircuitBreaker& b, const Data& d) noexcept;
  };

 public:
  using clock_type = C;
  using window_type = Window;
  // What this breaker type is configured with (BreakerConfig, CountWindowConfig or
  // TimeWindowConfig, by its window), and its shareable validated form.
  using Config = typename Window::config_type;
  using Policy = BreakerPolicy<C, Window>;

  // The right to make one call. Move-only. Report its outcome once with record();
  // destroying it without an outcome (an exception, a cancelled call) counts as
  // cancelled: it frees its half-open slot and counts as neither success nor failure.
  // An outcome reported after the breaker moved on (a call admitted while CLOSED that
  // completes after the breaker opened, or after a reset) changes nothing in the new
  // generation and frees no slot there; it still counts in the totals.
  class [[nodiscard]] Permit
      : public detail::PermitBase<typename BasicCircuitBreaker::PermitTraits> {
    using Base = detail::PermitBase<typename BasicCircuitBreaker::PermitTraits>;

   public:
    // Reports the call's outcome. `duration` is how long the call took; leave it zero
    // and a breaker that judges slowness measures the call itself (from admission to
    // this report, with the clock's coarse reading). Only the first report counts.
    void record(Outcome outcome, Nanos duration = Nanos::zero()) noexcept {
      if (BasicCircuitBreaker* b = this->take())
        b->release(Word(this->data().word), static_cast<Resolution>(outcome), duration,
                   this->data().start);
    }
    void record_success(Nanos duration = Nanos::zero()) noexcept {
      record(Outcome::success, duration);
    }
    void record_failure(Nanos duration = Nanos::zero()) noexcept {
      record(Outcome::failure, duration);
    }
    void ignore() noexcept { record(Outcome::ignored); }

    // True if this call is a HALF_OPEN probe.
    bool is_probe() const noexcept { return admitted_in() == State::half_open; }
    // The state the call was admitted in.
    State admitted_in() const noexcept {
      return static_cast<State>(Word(this->data().word).state());
    }
    // The breaker generation it was admitted in (see BreakerSnapshot::generation).
    std::uint32_t generation() const noexcept { return Word(this->data().word).gen(); }

   private:
    friend class BasicCircuitBreaker;
    Permit(BasicCircuitBreaker* breaker, Word word, Ticks start) noexcept
        : Base(breaker, {word.raw(), start}) {}
  };

  // Builds a breaker with its own policy (one allocation). Throws InvalidConfig naming
  // the field if `config` is invalid.
  explicit BasicCircuitBreaker(Config config) requires std::is_empty_v<C>
      : BasicCircuitBreaker(Policy(std::move(config))) {}
  BasicCircuitBreaker(Config config, const C& clock)
      : BasicCircuitBreaker(Policy(std::move(config), clock)) {}
  BasicCircuitBreaker(Config, const C&&) = delete;
  // Another kind of breaker's configuration does not compile.
  template <class Other, class... Rest>
  requires(detail::is_breaker_config_v<Other> &&
           !std::is_same_v<Other, Config>) explicit BasicCircuitBreaker(const Other&,
                                                                        const Rest&...)
      : policy_(nullptr), window_(WindowParams{}) {
    static_assert(sizeof(Other) == 0,
                  "each breaker kind takes its own configuration type: CircuitBreaker takes "
                  "BreakerConfig, CountWindowBreaker CountWindowConfig, TimeWindowBreaker "
                  "TimeWindowConfig (use Breaker::Config)");
  }

  // Builds a breaker that shares `policy` (and its listeners) with others. No
  // allocation, except a count window's ring.
  explicit BasicCircuitBreaker(const Policy& policy)
      : policy_(policy.data_), window_(policy.data_->window) {
    policy_->refs.fetch_add(1, std::memory_order_relaxed);
    since_.store(now(), std::memory_order_relaxed);
    if constexpr (Window::kind == WindowKind::time) window_.start(policy_->window, coarse_now());
  }

  BasicCircuitBreaker(const BasicCircuitBreaker&) = delete;
  BasicCircuitBreaker& operator=(const BasicCircuitBreaker&) = delete;
  ~BasicCircuitBreaker() {
    if (Cold::Ledgered::get(cold_.load(std::memory_order_relaxed))) detail::ledger_forget(totals_);
    Policy::release(policy_);
  }

  // Asks to make one call. Never blocks, never throws, never allocates.
  // CLOSED / METRICS_ONLY / DISABLED: admitted (one atomic load; a breaker that judges
  //   slowness also reads the coarse clock, and counts the call in flight).
  // OPEN: rejected until the open period has elapsed; then the first caller wins the
  //   transition to HALF_OPEN and is admitted as the probe.
  // HALF_OPEN: admitted while fewer than half_open.max_in_flight probes are in flight
  //   (and, with half_open.fraction, if this request is drawn).
  // FORCED_OPEN: rejected.
  [[gnu::always_inline]] Expected<Permit, Rejection> try_acquire() noexcept {
    const Word w(word_.load(std::memory_order_acquire));
    // The common case stays small enough to inline into the caller; everything else
    // (rejections, probes, transitions) is out of line.
    if (w.state() == static_cast<std::uint8_t>(State::closed)) {
      if constexpr (kWindowed) {
        if (policy_->slow_call_duration > 0) return Permit(this, w, admit_timed(w));
      }
      return Permit(this, w, 0);
    }
    const Decision d = acquire_slow(w);
    if ((d.word & Word::kStateMask) != kRejected) return Permit(this, Word(d.word), d.value);
    return Unexpected(Rejection{static_cast<RejectReason>(d.word >> 8), Nanos(d.value)});
  }

  // Runs `f` if the breaker admits the call. Returns its result, or the rejection.
  // A return counts as a success; an exception counts as a failure and is rethrown.
  template <class F>
  auto execute(F&& f) -> Expected<std::invoke_result_t<F&>, Rejection> {
    return execute(std::forward<F>(f), ReturnIsSuccess{});
  }

  // Runs `f` and lets `classify` say what its result meant: `classify(result)` (or
  // `classify()` for void results) returns an Outcome — e.g. a 5xx is a failure, a 4xx
  // is ignored. If `classify` is also callable with a std::exception_ptr, it classifies
  // exceptions too (otherwise they are failures). The caller always gets f's own
  // result or exception; a classifier that throws counts the call as a failure.
  template <class F, class Classify>
  auto execute(F&& f, Classify&& classify) -> Expected<std::invoke_result_t<F&>, Rejection> {
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

  // The current state. One atomic load.
  State state() const noexcept {
    return static_cast<State>(Word(word_.load(std::memory_order_acquire)).state());
  }

  // The configured name, the configuration as given, and the (shared) policy. The
  // first two read the immutable policy; policy() adds a reference to it.
  std::string_view name() const noexcept { return policy_->config.name; }
  const Config& config() const noexcept { return policy_->config; }
  Policy policy() const noexcept { return Policy(policy_); }

  // Manually moves the breaker to `target`:
  //   closed        from any state: like reset() (counters cleared, new generation)
  //   open          from any state but OPEN: opens for one open period
  //   half_open     from OPEN or FORCED_OPEN: starts probing now
  //   forced_open   rejects everything until the next manual transition
  //   disabled      admits everything, records nothing
  //   metrics_only  records outcomes and reports rates, never rejects
  // Asking for the current state is a no-op. An impossible request (HALF_OPEN from
  // CLOSED, say) returns TransitionError and changes nothing. Emits an event.
  Expected<void, TransitionError> transition_to(State target) noexcept {
    return manual(target, request_for(target));
  }

  // Back to CLOSED from any state with a new generation: counts and the window are
  // cleared, and outcomes of permits admitted before the reset count nowhere. Emits an
  // event unless the breaker already was CLOSED.
  void reset() noexcept { (void)manual(State::closed, Request::manual_reset); }

  // Adopting a decision made elsewhere about the same dependency (other instances of the
  // service sharing breaker state, as bulwark::redis does). Nothing on the call path
  // knows about it: unused, it costs nothing. Both are a few atomic operations and emit
  // an event; both return false and change nothing while the breaker is in a manual
  // state (FORCED_OPEN, DISABLED, METRICS_ONLY: an operator's decision wins) or another
  // thread is publishing a transition (call again later).
  //
  // adopt_open: CLOSED, OPEN or HALF_OPEN -> OPEN until `remaining` from now (an OPEN
  // breaker's end is moved), reason fleet_opened. Probes in flight stop counting. A
  // `remaining` longer than the current open period takes the growth level whose period
  // covers it (the growth the deciding breaker reached), so that retry_after and the
  // snapshot tell the time actually left.
  bool adopt_open(Nanos remaining) noexcept {
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
  // adopt_close: OPEN or HALF_OPEN -> CLOSED, reason fleet_closed, as if this breaker's
  // own probes had succeeded (the open-period growth is kept for flapping detection).
  bool adopt_close() noexcept {
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

  // What the breaker says about itself now (BreakerSnapshot). A few relaxed loads and
  // one clock read, plus the window's counters for a windowed breaker; no lock, no
  // allocation; changes nothing.
  BreakerSnapshot snapshot() const noexcept {
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

  // Bytes this breaker uses besides sizeof(*this) (a count window's ring).
  std::uint64_t extra_memory() const noexcept {
    if constexpr (kWindowed) {
      return window_.footprint();
    } else {
      return 0;
    }
  }

 private:
  template <class>
  friend struct BreakerTestAccess;

  // execute()'s default: a return is a success (exceptions are failures).
  struct ReturnIsSuccess {
    Outcome operator()() const noexcept { return Outcome::success; }
    template <class R>
    requires(!std::is_same_v<std::remove_cvref_t<R>, std::exception_ptr>) Outcome operator()(
        const R&) const noexcept {
      return Outcome::success;
    }
  };

  // How a permit ended. The first three mirror Outcome.
  enum class Resolution : std::uint8_t { success, failure, ignored, cancelled };
  static_assert(static_cast<int>(Resolution::success) == static_cast<int>(Outcome::success));
  static_assert(static_cast<int>(Resolution::failure) == static_cast<int>(Outcome::failure));
  static_assert(static_cast<int>(Resolution::ignored) == static_cast<int>(Outcome::ignored));

  // The word of rare totals and flags. Both totals saturate. Ledgered: some thread's
  // ledger has held a cell of this breaker's totals.
  struct Cold {
    using Cancelled = detail::Field<0, 38>;
    using Flapping = detail::Field<38, 1, bool>;
    using Ledgered = detail::Field<39, 1, bool>;
    using Opens = detail::Field<40, 24>;
    using View = detail::Layout<Cancelled, Flapping, Ledgered, Opens>;
  };

  // What the window says: its counts, the rates the rules compare, and the decision.
  struct Verdict {
    WindowCounts counts;
    std::optional<double> failure_rate, slow_call_rate;  // empty below the minimum volume
    Request trip = Request::none;                        // a rate rule fired
    bool armed = false;                                  // a rule is over, the volume is not
  };

  Ticks now() const noexcept { return now_ticks(policy_->clock.get()); }
  Ticks coarse_now() const noexcept { return coarse_now_ticks(policy_->clock.get()); }

  bool cas(Word& expected, Word desired) noexcept {
    std::uint64_t raw = expected.raw();
    const bool ok = word_.compare_exchange_weak(raw, desired.raw(), std::memory_order_acq_rel,
                                                std::memory_order_acquire);
    expected = Word(raw);
    return ok;
  }

  Ticks half_open_wait(Word w) const noexcept {
    const detail::PolicyCore& p = *policy_;
    if (p.half_open_max_wait <= 0) return p.open_period(w.reopens());
    if (w.pending()) return p.half_open_max_wait;
    const Ticks waited = saturating_sub(now(), since_.load(std::memory_order_relaxed));
    return std::max<Ticks>(0, p.half_open_max_wait - std::max<Ticks>(0, waited));
  }

  Ticks probe_start() const noexcept { return policy_->slow_call_duration > 0 ? coarse_now() : 0; }

  // Admission when the breaker judges slowness: the call's start time, and (if enabled)
  // the call counted in flight. The first admission of each epoch re-evaluates the
  // rates, so a dependency that stopped answering trips the breaker without any call
  // completing.
  Ticks admit_timed(Word w) noexcept {
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

  // What acquire_slow decided, in two words so that it comes back in registers and
  // the caller's inlined fast path can keep its permit out of memory: the admitted
  // word and the call's start, or kRejected | reason << 8 and the retry-after.
  struct Decision {
    std::uint64_t word;
    Ticks value;
  };
  static constexpr std::uint64_t kRejected = Word::kStateMask;  // no state has this value
  static_assert(static_cast<std::uint64_t>(State::metrics_only) < kRejected,
                "the rejection tag must not be a state");
  static Decision admit(Word w, Ticks start) noexcept { return {w.raw(), start}; }
  // Counts a rejection and tells the rejection listeners.
  Decision refuse(RejectReason reason, Ticks retry_after) noexcept {
    count(detail::Total::rejected);
    if (!policy_->rejection_listeners.empty()) [[unlikely]] {
      policy_->rejection_listeners.emit(
          RejectionEvent{name(), this, reason, Nanos(retry_after), now()});
    }
    return {kRejected | (std::uint64_t{static_cast<std::uint8_t>(reason)} << 8), retry_after};
  }

  // try_acquire() for every state but CLOSED, and for CLOSED again if the word moved.
  [[gnu::noinline]] Decision acquire_slow(Word w) noexcept {
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

  // Adds a request to a word whose transition is still being published, unless a
  // request that takes precedence is already there.
  static Word with_request(Word w, Request r) noexcept {
    return detail::request_priority(r) >= detail::request_priority(w.request()) ? w.with_request(r)
                                                                                : w;
  }

  void release(Word admitted, Resolution r, Nanos reported, Ticks start) noexcept {
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
        if (counted)
          closed_outcome(admitted, r == Resolution::failure, slow, was_in_flight_slow, t);
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

  // A CLOSED / METRICS_ONLY call of a windowed breaker completed.
  void closed_outcome(Word admitted, bool failure, bool slow, bool was_in_flight_slow,
                      Ticks t) noexcept {
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

  // The in-flight period of time `t` (see detail::InFlight::checked).
  std::uint64_t in_flight_period(Ticks t) const noexcept {
    return detail::InFlight::period_of(t, policy_->slow_call_duration, policy_->window.epoch_shift);
  }

  void closed_success(Word admitted) noexcept {
    Word w(word_.load(std::memory_order_acquire));
    // A success ends a run of consecutive failures. Only write when there is one:
    // the common case is a load and nothing else.
    while (w.gen() == admitted.gen() && w.consecutive_failures() != 0) {
      if (cas(w, w.with_consecutive_failures(0))) return;
    }
  }

  // Counts a consecutive failure; returns true if the rule tripped the breaker.
  bool closed_failure(Word admitted) noexcept {
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

  // Reads the window of generation `gen` and applies the rate rules.
  Verdict verdict(std::uint32_t gen, Ticks t) const noexcept {
    Verdict v;
    if constexpr (kWindowed) {
      const detail::PolicyCore& p = *policy_;
      v.counts = window_.counts(p.window, gen, t);
      if (p.window.track_in_flight) {
        const unsigned shift = p.window.epoch_shift;
        v.counts.in_flight_slow =
            window_.in_flight().slow_calls(gen, t, p.slow_call_duration, shift);
      }
      const std::uint64_t total = v.counts.calls + v.counts.in_flight_slow;
      const std::uint64_t minimum = Window::kind == WindowKind::count
                                        ? std::min(p.minimum_calls, p.window.size)
                                        : p.minimum_calls;
      if (total == 0) return v;
      const double fr = static_cast<double>(v.counts.failures) / static_cast<double>(total);
      const double sr = static_cast<double>(v.counts.slow() + v.counts.in_flight_slow) /
                        static_cast<double>(total);
      const bool over_f = p.failure_rate > 0 && fr >= p.failure_rate;
      const bool over_s = p.slow_call_rate > 0 && sr >= p.slow_call_rate;
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

  // Applies the rate rules to generation `gen`, tripping the breaker if one fires.
  void evaluate(std::uint32_t gen, Ticks t) noexcept {
    if constexpr (kWindowed) {
      Word w(word_.load(std::memory_order_acquire));
      const State s = static_cast<State>(w.state());
      if (w.gen() != gen || (s != State::closed && s != State::metrics_only)) return;
      if (policy_->window.track_in_flight)
        window_.in_flight().mark_checked(gen, in_flight_period(t));
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

  // What a stage's probe tally says. With a rate rule a stage judges N =
  // half_open_successes outcomes: it reopens as soon as it is certain to be over a
  // threshold (failures / N >= failure_rate, or slow / N >= slow_call_rate, counting
  // only the outcomes in), and passes as soon as it is certain to be under both even if
  // every remaining outcome were a slow failure — at the latest when all N are in.
  enum class Judgement : std::uint8_t { undecided, pass, reopen };
  static Judgement judge(const detail::PolicyCore& p, const detail::ProbeTally& t) noexcept {
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

  // A probe resolved. Only outcomes of the current round (generation) count, and with
  // a ramp only those of the stage the probe was admitted in. Without a rate rule any
  // probe failure of the round reopens and N successes pass a stage.
  void probe_resolved(Word admitted, Resolution r, bool slow) noexcept {
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

  // Where a request leads from word `w` at time `at`, or false if it makes no sense
  // there (any more). A reset leads to CLOSED even from CLOSED (a new generation).
  bool resolve_request(Word w, Request r, Ticks at, State& to, std::uint32_t& next_reopens,
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

  static bool manual_allowed(State from, State to) noexcept {
    return to != State::half_open || from == State::open || from == State::forced_open ||
           from == State::half_open;
  }

  Expected<void, TransitionError> manual(State target, Request req) noexcept {
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

  // Called by the thread whose CAS produced `w` (so `w` is pending): records when the
  // transition happened, announces it, then clears `pending` — first applying, one
  // at a time and in order, any transition requested in the meantime. While pending
  // is set nobody else can transition, so this thread alone writes since_ and the
  // rare-totals flags, events are delivered strictly in order, and nobody waits.
  void publish(Word w, State from, TransitionReason reason, Ticks at) noexcept {
    for (;;) {
      const State to = static_cast<State>(w.state());
      const Ticks previous_since = since_.load(std::memory_order_relaxed);
      since_.store(at, std::memory_order_relaxed);
      if constexpr (kWindowed) {
        // Every window word starts the new phase now, so that none of them can lag the
        // breaker's generation by enough for its shortened generation to wrap.
        const detail::Phase phase =
            (to == State::closed || to == State::metrics_only) ? detail::Phase::recording
            : to == State::half_open ? (from == State::half_open ? detail::Phase::probing_carried
                                                                 : detail::Phase::probing)
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

  // Adds one to a total in this thread's ledger, marking the breaker as having cells
  // to take back when it is destroyed.
  [[gnu::always_inline]] void count(detail::Total which) noexcept {
    if (detail::ledger_add(totals_, which)) [[unlikely]] {
      if (!Cold::Ledgered::get(cold_.load(std::memory_order_relaxed)))
        cold_.fetch_or(Cold::Ledgered::set(0, true), std::memory_order_relaxed);
    }
  }

  // Saturating adds to the rare totals; `flapping`, if given, replaces the flag (only
  // the publisher of a transition gives it). Rare events only.
  void add_cold(std::uint64_t cancelled, std::uint64_t opens,
                std::optional<bool> flapping = std::nullopt) noexcept {
    std::uint64_t cur = cold_.load(std::memory_order_relaxed);
    for (;;) {
      std::uint64_t next =
          Cold::Cancelled::set_saturated(cur, Cold::Cancelled::get(cur) + cancelled);
      next = Cold::Opens::set_saturated(next, Cold::Opens::get(next) + opens);
      if (flapping) next = Cold::Flapping::set(next, *flapping);
      if (cold_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) return;
    }
  }

  // True if an automatic trip from CLOSED word `w` at `t` would be flapping: the breaker
  // recovered (a successful probe round closed it; the word keeps the growth it had
  // then) less than flapping_period ago. `since_` is this CLOSED phase's start while the
  // word is not pending; a pending word's start is being published, so it is recent.
  bool flapping_trip(Word w, Ticks t_or_age, bool age = true) const noexcept {
    const detail::PolicyCore& p = *policy_;
    if (p.flapping_period <= 0 || w.reopens() == 0) return false;
    if (w.pending()) return true;
    const Ticks in_state =
        age ? t_or_age : saturating_sub(t_or_age, since_.load(std::memory_order_relaxed));
    return in_state < p.flapping_period;
  }

  // The reopen count an automatic trip from CLOSED word `w` at `at` opens with: a
  // flapping trip continues the growth the breaker recovered at, any other starts at 1.
  std::uint32_t trip_reopens(Word w, Ticks at) const noexcept {
    return flapping_trip(w, at, false) ? std::min(w.reopens() + 1, Word::kReopenMax) : 1;
  }

  template <class Classify, class... Args>
  static Outcome classify_value(Classify& classify, const Args&... args) noexcept {
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

  std::atomic<std::uint64_t> word_{
      Word().with_state(static_cast<std::uint8_t>(State::closed)).raw()};
  std::atomic<Ticks> since_{0};  // when the current state began; written only while pending
  detail::PolicyData<C, Config>* policy_;
  detail::Totals totals_;               // counted per thread: see detail/ledger.h
  std::atomic<std::uint64_t> cold_{0};  // see Cold
  [[no_unique_address]] Window window_;
};

template <Clock C, class Window>
void BasicCircuitBreaker<C, Window>::PermitTraits::abandon(BasicCircuitBreaker& b,
                                                           const Data& d) noexcept {
  b.release(Word(d.word), Resolution::cancelled, Nanos::zero(), d.start);
}

using CircuitBreaker = BasicCircuitBreaker<SteadyClock, NoWindow>;
using CountWindowBreaker = BasicCircuitBreaker<SteadyClock, CountWindow>;
using TimeWindowBreaker = BasicCircuitBreaker<SteadyClock, TimeWindow<10>>;

static_assert(sizeof(CircuitBreaker) == 64, "a breaker without a window fits one cache line");
static_assert(sizeof(TimeWindowBreaker) <= 256,
              "a 10-bucket time-window breaker fits four cache lines");

}  // namespace bulwark

#endif  // BULWARK_CIRCUIT_BREAKER_H_
