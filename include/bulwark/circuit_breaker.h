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
//   StripedTimeWindowBreaker<S>  TimeWindow<10, S>: the same, with its buckets kept once
//                       per stripe of threads (S of them, on lines of their own:
//                       sizeof is 192 x (S + 1) bytes), so that fast successes of
//                       threads of different stripes write no common cache line. For
//                       one breaker called from many cores at once; a judgement, a
//                       snapshot and a bucket clear cost S times a single stripe's. At
//                       rest it reads and decides as TimeWindowBreaker; while calls are
//                       in flight a reading sees each stripe as of its last write.
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
#include "bulwark/detail/breaker_policy.h"
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
  // than a previous snapshot's. A snapshot reads one set (4 cells) per thread that counted.
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

  // The configuration as given (the latest reconfigure()'s). No copy; the reference
  // stays valid as long as the policy.
  const Config& config() const noexcept { return *data_->config.load(std::memory_order_acquire); }

  // Gives every breaker of this policy new thresholds for the decisions it makes from
  // now on: consecutive_failures, failure_rate, slow_call_rate (on, off or changed),
  // minimum_calls, open_duration, open_growth, flapping_period, half_open.max_wait.
  // Breakers keep their state: counts, window, state, a half-open round and permits in
  // flight; an OPEN period in progress stays OPEN and its end is judged against the new
  // open_duration / open_growth from the next request on (a shorter one may end it). `config` is
  // checked first, and one that is invalid or changes anything else (the window,
  // slow_call_duration, the half-open round's shape, the name) throws InvalidConfig naming the
  // field and changes nothing. A decision racing with it may see some old and some new thresholds.
  // Costs an allocation: every configuration given is kept until the policy dies (config()'s
  // references stay valid), so reload on a change, not in a loop. Calls are never blocked.
  void reconfigure(Config next) {
    detail::BreakerSpec spec = detail::spec_of(next);
    if (auto ok = detail::validate_spec(spec, detail::window_capacity<Window>()); !ok) {
      detail::raise_config_error(std::move(ok).error());
    }
    std::lock_guard lock(data_->reconfigure_mutex);
    detail::check_retunable(data_->spec_now, spec);
    data_->configs.push_back(std::make_unique<const Config>(std::move(next)));
    data_->spec_now = std::move(spec);
    data_->retune(data_->spec_now);
    data_->config.store(data_->configs.back().get(), std::memory_order_release);
  }

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
    if (w.state() == static_cast<std::uint8_t>(State::closed)) [[likely]] {
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
  auto execute(F&& f, Classify&& classify) -> Expected<std::invoke_result_t<F&>, Rejection>;

  // The current state. One atomic load.
  State state() const noexcept {
    return static_cast<State>(Word(word_.load(std::memory_order_acquire)).state());
  }

  // The configured name, the configuration as given, and the (shared) policy. The
  // first two read the immutable policy; policy() adds a reference to it.
  std::string_view name() const noexcept {
    return policy_->config.load(std::memory_order_acquire)->name;
  }
  // The policy's configuration (the latest BreakerPolicy::reconfigure()'s).
  const Config& config() const noexcept { return *policy_->config.load(std::memory_order_acquire); }
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
  bool adopt_open(Nanos remaining) noexcept;
  // adopt_close: OPEN or HALF_OPEN -> CLOSED, reason fleet_closed, as if this breaker's
  // own probes had succeeded (the open-period growth is kept for flapping detection).
  bool adopt_close() noexcept;

  // What the breaker says about itself now (BreakerSnapshot). A few relaxed loads and
  // one clock read, plus the window's counters for a windowed breaker; no lock, no
  // allocation; changes nothing.
  BreakerSnapshot snapshot() const noexcept;

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
  Ticks admit_timed(Word w) noexcept;

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
  Decision refuse(RejectReason reason, Ticks retry_after) noexcept;

  // try_acquire() for every state but CLOSED, and for CLOSED again if the word moved.
  [[gnu::noinline]] Decision acquire_slow(Word w) noexcept;

  // Adds a request to a word whose transition is still being published, unless a
  // request that takes precedence is already there.
  static Word with_request(Word w, Request r) noexcept {
    return detail::request_priority(r) >= detail::request_priority(w.request()) ? w.with_request(r)
                                                                                : w;
  }

  void release(Word admitted, Resolution r, Nanos reported, Ticks start) noexcept;

  // A CLOSED / METRICS_ONLY call of a windowed breaker completed.
  void closed_outcome(Word admitted, bool failure, bool slow, bool was_in_flight_slow,
                      Ticks t) noexcept;

  // The in-flight period of time `t` (see detail::InFlight::checked).
  std::uint64_t in_flight_period(Ticks t) const noexcept {
    return detail::InFlight::period_of(t, policy_->slow_call_duration, policy_->window.epoch_shift);
  }

  void closed_success(Word admitted) noexcept;

  // Counts a consecutive failure; returns true if the rule tripped the breaker.
  bool closed_failure(Word admitted) noexcept;

  // Reads the window of generation `gen` and applies the rate rules.
  Verdict verdict(std::uint32_t gen, Ticks t) const noexcept;

  // Applies the rate rules to generation `gen`, tripping the breaker if one fires.
  void evaluate(std::uint32_t gen, Ticks t) noexcept;

  // What a stage's probe tally says. With a rate rule a stage judges N =
  // half_open_successes outcomes: it reopens as soon as it is certain to be over a
  // threshold (failures / N >= failure_rate, or slow / N >= slow_call_rate, counting
  // only the outcomes in), and passes as soon as it is certain to be under both even if
  // every remaining outcome were a slow failure — at the latest when all N are in.
  enum class Judgement : std::uint8_t { undecided, pass, reopen };
  static Judgement judge(const detail::PolicyCore& p, const detail::ProbeTally& t) noexcept;

  // A probe resolved. Only outcomes of the current round (generation) count, and with
  // a ramp only those of the stage the probe was admitted in. Without a rate rule any
  // probe failure of the round reopens and N successes pass a stage.
  void probe_resolved(Word admitted, Resolution r, bool slow) noexcept;

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
                       TransitionReason& reason) const noexcept;

  static bool manual_allowed(State from, State to) noexcept {
    return to != State::half_open || from == State::open || from == State::forced_open ||
           from == State::half_open;
  }

  Expected<void, TransitionError> manual(State target, Request req) noexcept;

  // Called by the thread whose CAS produced `w` (so `w` is pending): records when the
  // transition happened, announces it, then clears `pending` — first applying, one
  // at a time and in order, any transition requested in the meantime. While pending
  // is set nobody else can transition, so this thread alone writes since_ and the
  // rare-totals flags, events are delivered strictly in order, and nobody waits.
  void publish(Word w, State from, TransitionReason reason, Ticks at) noexcept;

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
                std::optional<bool> flapping = std::nullopt) noexcept;

  // True if an automatic trip from CLOSED word `w` at `t` would be flapping: the breaker
  // recovered (a successful probe round closed it; the word keeps the growth it had
  // then) less than flapping_period ago. `since_` is this CLOSED phase's start while the
  // word is not pending; a pending word's start is being published, so it is recent.
  bool flapping_trip(Word w, Ticks t_or_age, bool age = true) const noexcept;

  // The reopen count an automatic trip from CLOSED word `w` at `at` opens with: a
  // flapping trip continues the growth the breaker recovered at, any other starts at 1.
  std::uint32_t trip_reopens(Word w, Ticks at) const noexcept {
    return flapping_trip(w, at, false) ? std::min(w.reopens() + 1, Word::kReopenMax) : 1;
  }

  template <class Classify, class... Args>
  static Outcome classify_value(Classify& classify, const Args&... args) noexcept;

  std::atomic<std::uint64_t> word_{
      Word().with_state(static_cast<std::uint8_t>(State::closed)).raw()};
  std::atomic<Ticks> since_{0};  // when the current state began; written only while pending
  detail::PolicyData<C, Config>* policy_;
  detail::Totals totals_;               // counted per thread: see detail/ledger.h
  std::atomic<std::uint64_t> cold_{0};  // see Cold
  [[no_unique_address]] Window window_;
};

using CircuitBreaker = BasicCircuitBreaker<SteadyClock, NoWindow>;
using CountWindowBreaker = BasicCircuitBreaker<SteadyClock, CountWindow>;
using TimeWindowBreaker = BasicCircuitBreaker<SteadyClock, TimeWindow<10>>;
template <std::uint32_t Stripes>
using StripedTimeWindowBreaker = BasicCircuitBreaker<SteadyClock, TimeWindow<10, Stripes>>;

static_assert(sizeof(CircuitBreaker) == 64, "a breaker without a window fits one cache line");
static_assert(sizeof(TimeWindowBreaker) <= 256,
              "a 10-bucket time-window breaker fits four cache lines");

}  // namespace bulwark

// The state machine: definitions of the members declared above.
#include "bulwark/detail/circuit_breaker_impl.h"

#endif  // BULWARK_CIRCUIT_BREAKER_H_
