// The lab's discrete-event simulation of one caller instance (simulate.h describes
// the model). Private to the lab: simulate.cc runs one per configuration, and a
// caller that interleaves several in one virtual time (a fleet of instances) drives
// each through start() / next_time() / process_next() / finish().

#ifndef BULWARK_LAB_SRC_SIMULATION_H_
#define BULWARK_LAB_SRC_SIMULATION_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <optional>
#include <utility>
#include <vector>

#include "breakers.h"
#include "bulwark/adaptive_limit.h"
#include "bulwark/backoff.h"
#include "bulwark/bulkhead.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/simulate.h"
#include "bulwark/load_shedder.h"
#include "bulwark/retry.h"
#include "bulwark/retry_budget.h"
#include "bulwark/throttle.h"

namespace bulwark::lab::detail {

inline constexpr Ticks kSecond = 1'000'000'000;
inline constexpr Ticks kMaxLatency = 24 * 3600 * kSecond;

inline double unit_interval(std::uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// The draws of request `index`'s attempt `attempt`: the same in every configuration.
// `mixed` is draws_seed(the scenario's seed), computed once per run.
inline std::uint64_t draws_seed(std::uint64_t seed) {
  return SplitMix64(seed ^ 0x6C62272E07BB0142ull)();
}
inline SplitMix64 draws_for_mixed(std::uint64_t mixed, std::uint64_t index, std::uint32_t attempt) {
  const std::uint64_t a = mixed ^ (index * 0x9E3779B97F4A7C15ull);
  SplitMix64 g(a + attempt * 0xD1B54A32D192ED03ull);
  return SplitMix64(g());
}

inline Nanos sample(const Latency& l, SplitMix64& g) {
  double ns = 0;
  switch (l.distribution) {
    case Latency::Distribution::constant:
      return l.value;
    case Latency::Distribution::uniform:
      ns = static_cast<double>(l.min.count()) +
           unit_interval(g()) * static_cast<double>((l.max - l.min).count());
      break;
    case Latency::Distribution::exponential:
      ns = -static_cast<double>(l.mean.count()) * std::log1p(-unit_interval(g()));
      break;
    case Latency::Distribution::lognormal: {
      // Box-Muller; u1 in (0, 1] so the log is finite.
      const double u1 = 1.0 - unit_interval(g());
      const double u2 = unit_interval(g());
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      ns = static_cast<double>(l.median.count()) * std::exp(l.sigma * z);
      break;
    }
  }
  if (!(ns > 0)) return Nanos::zero();
  if (ns >= static_cast<double>(kMaxLatency)) return Nanos(kMaxLatency);
  return Nanos(static_cast<Ticks>(ns));
}

// Page latencies in log-linear buckets of microseconds (128 per power of two: under
// 1 % error), so memory does not grow with the number of pages.
class Histogram {
 public:
  void add(Nanos d) {
    const auto us = static_cast<std::uint64_t>(std::max<Ticks>(0, d.count()) / 1000);
    const std::size_t i = index(us);
    if (i >= counts_.size()) [[unlikely]]
      grow(i);
    ++counts_[i];
    ++n_;
    min_ = std::min(min_, d);
    max_ = std::max(max_, d);
  }

  // The q-quantile: the middle of its bucket, clamped to what was observed.
  Nanos quantile(double q) const {
    if (n_ == 0) return Nanos::zero();
    const auto rank = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(n_))));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const auto [lo, width] = bucket(i);
        const Nanos mid(static_cast<Ticks>((lo + width / 2) * 1000));
        return std::clamp(mid, min_, max_);
      }
    }
    return max_;
  }
  Nanos max() const { return n_ == 0 ? Nanos::zero() : max_; }

 private:
  // Out of line: the buckets grow only as far as the longest latency seen.
  [[gnu::noinline]] void grow(std::size_t i) { counts_.resize(i + 1, 0); }

  static constexpr unsigned kSubBits = 7;
  static constexpr std::uint64_t kSub = 1u << kSubBits;
  static std::size_t index(std::uint64_t v) {
    if (v < kSub) return static_cast<std::size_t>(v);
    const unsigned e = static_cast<unsigned>(std::bit_width(v)) - kSubBits - 1;
    return static_cast<std::size_t>(kSub + e * kSub + ((v >> e) - kSub));
  }
  static std::pair<std::uint64_t, std::uint64_t> bucket(std::size_t i) {
    if (i < kSub) return {i, 1};
    const std::uint64_t e = (i - kSub) / kSub;
    const std::uint64_t m = (i - kSub) % kSub + kSub;
    return {m << e, std::uint64_t{1} << e};
  }

  std::vector<std::uint64_t> counts_;
  std::uint64_t n_ = 0;
  Nanos min_ = Nanos::max();
  Nanos max_ = Nanos::min();
};

// A first-in first-out queue in a ring buffer that grows by doubling: no allocation
// once it has reached the largest size it needs.
template <class T>
class Fifo {
 public:
  bool empty() const noexcept { return head_ == tail_; }
  const T& front() const noexcept { return buf_[head_ & (buf_.size() - 1)]; }
  void pop() noexcept { ++head_; }
  void push(const T& v) {
    if (tail_ - head_ == buf_.size()) grow();
    buf_[tail_++ & (buf_.size() - 1)] = v;
  }

 private:
  void grow() {
    std::vector<T> next(std::max<std::size_t>(16, 2 * buf_.size()));
    for (std::size_t i = head_; i != tail_; ++i) next[i - head_] = buf_[i & (buf_.size() - 1)];
    tail_ -= head_;
    head_ = 0;
    buf_.swap(next);
  }

  std::vector<T> buf_;
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
};

// Stands in for a breaker in configurations without one.
struct NoBreaker {
  struct Permit {
    void record(Outcome, Nanos) noexcept {}
  };
};

enum class PageResult : std::uint8_t { full, degraded, failed };

template <class B>
class Simulation {
  static constexpr bool kHasBreaker = !std::is_same_v<B, NoBreaker>;
  using Permit = typename B::Permit;
  using Bulkhead = BasicBulkhead<ManualClock>;
  using Budget = BasicRetryBudget<ManualClock>;
  using Limit = BasicAdaptiveLimit<ManualClock>;
  // The shedder's limit: a fixed one, or the adaptive limit its permits feed.
  struct ShedLimit {
    std::size_t fixed = 64;
    std::optional<BasicAdaptiveLimitSource<ManualClock>> adaptive;
    std::size_t limit() const noexcept { return adaptive ? adaptive->limit() : fixed; }
    void on_sample(Nanos rtt, bool dropped, std::size_t in_flight) noexcept {
      if (adaptive) adaptive->on_sample(rtt, dropped, in_flight);
    }
    void on_sample(Nanos rtt, bool dropped) noexcept { on_sample(rtt, dropped, 0); }
    void on_queue_timeout(Nanos waited) noexcept {
      if (adaptive) adaptive->on_queue_timeout(waited);
    }
  };
  using Shedder = BasicLoadShedder<ShedLimit, ManualClock>;
  static constexpr std::uint32_t kNoPermit = std::numeric_limits<std::uint32_t>::max();

 public:
  Simulation(const Scenario& scenario, const ResilienceConfig& config,
             const SimulateOptions& options)
      : scenario_(scenario),
        config_(config),
        step_(options.timeline_step.count()),
        progress_(options.progress),
        progress_context_(options.progress_context) {
    result_.name = config.name;
    if (config.breaker) result_.alert_when_open_for = config.alert_when_open_for;
    if constexpr (kHasBreaker) {
      typename B::Policy policy(config.breaker->as<typename B::Config>(), clock_);
      // The report covers the scenario's duration: not what pages finishing after it do.
      policy.on_transition([this](const TransitionEvent& e) {
        if (!draining_) result_.transitions.push_back({Nanos(e.at), e.from, e.to, e.reason});
      });
      breaker_ = std::make_unique<B>(policy);
      result_.has_breaker = true;
    }
    if (config.bulkhead) bulkhead_.emplace(*config.bulkhead, clock_);
    if (config.adaptive_limit) limit_.emplace(*config.adaptive_limit, clock_);
    if (config.throttle) throttle_.emplace(*config.throttle, clock_);
    if (config.shedder) {
      ShedLimit l;
      l.fixed = config.shedder->limit;
      if (config.shedder->adaptive_limit) {
        shed_limiter_.emplace(*config.shedder->adaptive_limit, clock_);
        l.adaptive.emplace(*shed_limiter_, config.shedder->queue_timeout_is_drop);
      }
      shedder_.emplace(config.shedder->config, std::move(l), clock_);
    }
    if (config.retry) {
      RetryConfig rc = config.retry->config;
      // A fresh generator per run: the same scenario always simulates the same way.
      auto rng = std::make_shared<SplitMix64>(config.retry->random_seed);
      rc.random = [rng] { return (*rng)(); };
      retry_.emplace(std::move(rc));
      if (config.retry_budget) budget_.emplace(*config.retry_budget, clock_);
    }
    if (scenario.dependency.server) server_ = &*scenario.dependency.server;
    for (const Phase& p : scenario.dependency.phases) varying_rate_ |= p.arrival_rate.has_value();
    arrivals_rng_ = SplitMix64(scenario.seed ^ 0x243F6A8885A308D3ull);
    draws_seed_ = draws_seed(scenario.seed);
    result_.timeline.push_back(TimelineStep{});
  }

  // The whole run: start(), process_next() while next_time() <= end(), finish().
  ConfigurationResult run() {
    start();
    const Ticks end = this->end();
    std::uint32_t events = 0;
    for (Source s = next_source(); s != Source::none && time_of(s) <= end; s = next_source()) {
      process(s);
      if (++events % kProgressEvery == 0 && progress_) {
        progress_(config_.name, clock_.now().time_since_epoch(), scenario_.duration,
                  progress_context_);
      }
    }
    return finish();
  }

  // Driving the run one event at a time, for a caller that interleaves several
  // simulations in one virtual time (the fleet's instances).
  void start() { schedule_next_arrival(); }
  Ticks end() const { return scenario_.duration.count(); }
  // The next event's time; Ticks max when none is left.
  Ticks next_time() const {
    Ticks t = next_arrival_;
    if (!heap_.empty()) t = std::min(t, heap_.front().t);
    if (!pages_.empty()) t = std::min(t, pages_.front().t);
    if (!expiries_.empty()) t = std::min(t, expiries_.front().t);
    return t;
  }
  // Processes the next event (next_time() <= end()).
  void process_next() { process(next_source()); }
  // Moves the clock (and the timeline) to `t` without an event: t >= the last event's
  // time and <= next_time(). For work the caller does between events at `t`.
  void advance_to(Ticks t) {
    advance_timeline(t);
    clock_.set(Nanos(t));
  }
  ConfigurationResult finish() {
    const Ticks end = this->end();
    advance_timeline(end);
    close_step();
    if (result_.timeline.back().start.count() >= end && result_.timeline.size() > 1) {
      result_.timeline.pop_back();  // a step that would start exactly at the end
    }
    // No arrival comes after the end; the pages in progress finish (their counts go to
    // the totals, not to the timeline), so every request is accounted for.
    draining_ = true;
    for (Source s = next_source(); s != Source::none; s = next_source()) {
      if (s == Source::arrival) {
        const Ticks t = take_arrival();
        clock_.set(Nanos(t));
        on_arrival(t);
      } else {
        const Event e = take(s);
        clock_.set(Nanos(e.t));
        dispatch(e);
      }
    }
    if (limit_ || shed_limiter_) summarize_limit();
    if (server_) summarize_load(end);
    if (config_.goal && config_.goal->limit_settles_near && result_.limit_settled) {
      const double target = *config_.goal->limit_settles_near;
      const bool near = std::abs(*result_.limit_settled - target) <= 0.3 * target;
      result_.goal_met = result_.goal_met.value_or(true) && near;
    }
    result_.p50 = latency_.quantile(0.50);
    result_.p99 = latency_.quantile(0.99);
    result_.max = latency_.max();
    summarize_breaker(end);
    // Permits go back before the objects they came from (none is left after draining,
    // but a request's members must never outlive the breaker or bulkhead).
    requests_.clear();
    return std::move(result_);
  }

  // The instance's breaker (nullptr without one) and clock, for the caller to attach
  // to other objects (a fleet) that must see the same virtual time.
  B* breaker() const noexcept {
    if constexpr (kHasBreaker) {
      return breaker_.get();
    } else {
      return nullptr;
    }
  }
  ManualClock& clock() noexcept { return clock_; }

 private:
  enum class Kind : std::uint8_t {
    arrival,
    attempt_done,
    retry,
    wait_expired,
    page_done,
    server_done,
    shed_expired
  };

  struct Event {
    Ticks t;
    std::uint64_t seq;
    std::uint32_t req;
    std::uint32_t gen;
    Kind kind;
    bool failed = false;
    bool timed_out = false;
    bool refused = false;  // attempt_done: refused by the server or its shedder (overload)
    PageResult result = PageResult::full;
    std::uint32_t permit = kNoPermit;  // server_done: the shedder's permit it holds
  };
  // The event order: time, then at equal times everything else before arrivals (as in
  // replay: a call that ends at t frees its worker, slot and permit for a request
  // arriving at t), then the order they were scheduled in (seq). The one pending
  // arrival is kept apart (next_arrival_), page completions and wait expiries (each a
  // constant delay after the current time) in FIFOs that are already in that order,
  // and only attempt completions and retries, whose delays vary, in the heap.
  static bool before(const Event& a, const Event& b) noexcept {
    return a.t != b.t ? a.t < b.t : a.seq < b.seq;
  }

  // Where the next event in that order is.
  enum class Source : std::uint8_t { none, arrival, heap, pages, expiries };
  Source next_source() const noexcept {
    Source s = Source::none;
    const Event* best = nullptr;
    if (!heap_.empty()) best = &heap_.front(), s = Source::heap;
    if (!pages_.empty() && (!best || before(pages_.front(), *best))) {
      best = &pages_.front(), s = Source::pages;
    }
    if (!expiries_.empty() && (!best || before(expiries_.front(), *best))) {
      best = &expiries_.front(), s = Source::expiries;
    }
    if (next_arrival_ != kNoArrival && (!best || next_arrival_ < best->t)) s = Source::arrival;
    return s;
  }
  Ticks time_of(Source s) const noexcept {
    switch (s) {
      case Source::arrival:
        return next_arrival_;
      case Source::heap:
        return heap_.front().t;
      case Source::pages:
        return pages_.front().t;
      case Source::expiries:
        return expiries_.front().t;
      case Source::none:
        break;
    }
    return std::numeric_limits<Ticks>::max();
  }
  Ticks take_arrival() noexcept {
    const Ticks t = next_arrival_;
    next_arrival_ = kNoArrival;
    return t;
  }
  // Removes and returns the first event of `s` (heap, pages or expiries).
  Event take(Source s) noexcept {
    switch (s) {
      case Source::pages: {
        const Event e = pages_.front();
        pages_.pop();
        return e;
      }
      case Source::expiries: {
        const Event e = expiries_.front();
        expiries_.pop();
        return e;
      }
      default:
        break;
    }
    const Event e = heap_.front();
    heap_pop();
    return e;
  }

  // Processes the first event of `s` (nothing for none).
  void process(Source s) {
    if (s == Source::none) return;
    if (s == Source::arrival) {
      const Ticks t = take_arrival();
      advance_timeline(t);
      clock_.set(Nanos(t));
      on_arrival(t);
      return;
    }
    const Event e = take(s);
    advance_timeline(e.t);
    clock_.set(Nanos(e.t));
    dispatch(e);
  }

  // The heap, a binary one in before() order (a 4-ary one ran more instructions here).
  struct Later {
    bool operator()(const Event& a, const Event& b) const noexcept { return before(b, a); }
  };
  void heap_push(const Event& e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }
  void heap_pop() noexcept {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    heap_.pop_back();
  }

  struct Request {
    Ticks arrived = 0;
    Ticks admitted = 0;  // breaker admission: the whole call's duration starts here
    Ticks attempt_started = 0;
    std::uint64_t index = 0;
    Nanos previous_delay = Nanos::zero();
    std::uint32_t attempts = 0;
    std::uint32_t gen = 0;
    bool waiting = false;                // for a bulkhead slot
    bool shed_waiting = false;           // in the shedder's queue
    Ticks shed_since = 0;                // when it entered that queue
    Ticks attempt_deadline = kTicksMax;  // the attempt's timeout, for the shedder
    std::optional<Nanos> retry_after{};  // a shedder refusal's hint, for the retry
    bool active = false;
    std::optional<Permit> permit;
    std::optional<typename Bulkhead::Permit> slot;
    std::optional<typename Budget::Ticket> ticket;
    std::optional<typename Limit::Permit> limit_permit;
  };

  struct Waiter {
    std::uint32_t req;
    std::uint32_t gen;
  };

  void dispatch(const Event& e) {
    switch (e.kind) {
      case Kind::arrival:
        on_arrival(e.t);
        break;
      case Kind::attempt_done:
        if (live(e)) on_attempt_done(e);
        break;
      case Kind::retry:
        if (live(e)) start_attempt(e.req, e.t);
        break;
      case Kind::wait_expired:
        if (live(e) && requests_[e.req].waiting) {
          requests_[e.req].waiting = false;
          finish(e.req, e.t, Reason::bulkhead_full);
        }
        break;
      case Kind::page_done:
        if (live(e)) page_done(e.req, e.t, e.result);
        break;
      case Kind::server_done:
        on_server_done(e);
        break;
      case Kind::shed_expired:
        if (live(e) && requests_[e.req].shed_waiting) shed_expire(e);
        break;
    }
  }

  bool live(const Event& e) const {
    const Request& r = requests_[e.req];
    return r.active && r.gen == e.gen;
  }

  void push(Ticks t, std::uint32_t req, Kind kind, bool failed = false, bool timed_out = false,
            PageResult result = PageResult::full) {
    const Event e{t, seq_++, req, requests_[req].gen, kind, failed, timed_out, false, result};
    switch (kind) {
      case Kind::page_done:
        pages_.push(e);
        break;
      case Kind::wait_expired:
        expiries_.push(e);
        break;
      case Kind::attempt_done:
      case Kind::retry:
      case Kind::server_done:
      case Kind::shed_expired:
        heap_push(e);
        break;
      case Kind::arrival:
        break;
    }
  }

  // ---- timeline ----------------------------------------------------------------

  // The current timeline step; after the end, a scratch step nobody reads.
  TimelineStep& step() { return draining_ ? scratch_ : result_.timeline.back(); }

  void close_step() {
    if (limit_) result_.timeline.back().limit = limit_->limit();
    if (shed_limiter_) result_.timeline.back().limit = shed_limiter_->limit();
    if constexpr (kHasBreaker) result_.timeline.back().state = breaker_->state();
  }

  void advance_timeline(Ticks t) {
    while (t >= result_.timeline.back().start.count() + step_) {
      close_step();
      if (result_.timeline.size() >= kMaxSteps) return;
      TimelineStep next;
      next.start = result_.timeline.back().start + Nanos(step_);
      next.peak_in_flight = in_flight_;
      next.peak_busy = busy_;
      result_.timeline.push_back(next);
    }
  }

  void note_levels() {
    step().peak_in_flight = std::max(step().peak_in_flight, in_flight_);
    step().peak_busy = std::max(step().peak_busy, busy_);
    result_.peak_in_flight = std::max(result_.peak_in_flight, in_flight_);
    result_.peak_busy = std::max(result_.peak_busy, busy_);
  }

  // ---- the request's way ---------------------------------------------------------

  void schedule_next_arrival() {
    double rate = scenario_.arrivals.rate;
    double at = 0;
    if (varying_rate_) {
      // Phases set the rate: each gap at the rate in effect now (the last arrival's).
      rate = phase_at(clock_.now().time_since_epoch().count()).arrival_rate.value_or(rate);
      if (scenario_.arrivals.process == ArrivalProcess::constant) {
        at = next_poisson_;
        next_poisson_ += 1e9 / rate;
      } else {
        next_poisson_ += -std::log1p(-unit_interval(arrivals_rng_())) * 1e9 / rate;
        at = next_poisson_;
      }
    } else if (scenario_.arrivals.process == ArrivalProcess::constant) {
      at = static_cast<double>(arrival_index_) * 1e9 / rate;
    } else {
      next_poisson_ += -std::log1p(-unit_interval(arrivals_rng_())) * 1e9 / rate;
      at = next_poisson_;
    }
    if (at >= static_cast<double>(scenario_.duration.count())) return;
    next_arrival_ = static_cast<Ticks>(at);
  }

  void on_arrival(Ticks t) {
    const std::uint64_t index = arrival_index_++;
    schedule_next_arrival();
    ++result_.requests;
    ++step().arrivals;
    if (busy_ >= scenario_.caller.workers) {
      ++result_.lost;
      ++step().lost;
      return;
    }
    ++busy_;
    note_levels();
    const std::uint32_t id = allocate();
    Request& r = requests_[id];
    r.arrived = t;
    r.index = index;
    start_call(id, t);
  }

  void start_call(std::uint32_t id, Ticks t) {
    Request& r = requests_[id];
    if constexpr (kHasBreaker) {
      auto p = breaker_->try_acquire();
      if (!p) return finish(id, t, reason_of(p.error().reason));
      r.permit.emplace(std::move(*p));
      r.admitted = t;
    }
    if (bulkhead_) {
      auto slot = bulkhead_->try_acquire();
      if (!slot) {
        if (bulkhead_->config().max_wait > Nanos::zero()) {
          r.waiting = true;
          waiters_.push({id, r.gen});
          push(saturating_add(t, bulkhead_->config().max_wait.count()), id, Kind::wait_expired);
          return;
        }
        return finish(id, t, Reason::bulkhead_full);  // the breaker permit is cancelled
      }
      r.slot.emplace(std::move(*slot));
    }
    begin_attempts(id, t);
  }

  void begin_attempts(std::uint32_t id, Ticks t) {
    if (budget_) budget_->deposit();  // one per logical request
    start_attempt(id, t);
  }

  void start_attempt(std::uint32_t id, Ticks t) {
    Request& r = requests_[id];
    if constexpr (kHasBreaker) {
      if (config_.breaker_scope == BreakerScope::attempt && r.attempts > 0) {
        auto p = breaker_->try_acquire();
        if (!p) {
          r.ticket.reset();  // the retry never starts: its token goes back
          return finish(id, t, reason_of(p.error().reason));
        }
        r.permit.emplace(std::move(*p));
      }
    }
    if (throttle_ && !throttle_->try_acquire()) {
      r.ticket.reset();
      return finish(id, t, Reason::throttled);
    }
    if (limit_) {
      auto p = limit_->try_acquire();
      if (!p) {
        r.ticket.reset();
        return finish(id, t, Reason::bulkhead_full);
      }
      r.limit_permit.emplace(std::move(*p));
    }
    if (r.ticket) {
      r.ticket->commit();
      r.ticket.reset();
    }
    const std::uint32_t n = ++r.attempts;
    if (n > 1) ++result_.retries;
    const Phase& phase = phase_at(t);
    SplitMix64 g = draws_for_mixed(draws_seed_, r.index, n);
    if (server_) return submit(id, t, phase, g);
    bool failed = unit_interval(g()) < phase.error_rate;
    Nanos took = sample(phase.latency, g);
    bool timed_out = false;
    if (config_.timeout && took > *config_.timeout) {
      took = *config_.timeout;
      failed = true;
      timed_out = true;
    }
    r.attempt_started = t;
    ++in_flight_;
    note_levels();
    ++result_.calls;
    ++step().calls;
    if (phase.degraded) ++result_.calls_while_degraded;
    push(saturating_add(t, took.count()), id, Kind::attempt_done, failed, timed_out);
  }

  void on_attempt_done(const Event& e) {
    Request& r = requests_[e.req];
    // With a server, the answer and the timeout race: the first one ends the attempt
    // and the other is stale from here on.
    if (server_) ++r.gen;
    if (r.shed_waiting) leave_shed_queue(r, e.t);  // timed out while the shedder queued it
    --in_flight_;
    if (throttle_) throttle_->record(!e.failed);
    if (r.limit_permit) {
      // As the library's pipeline stage settles it: a success gives its round trip; an
      // overload signal (a timeout, a refusal by the server or its shedder) says "too
      // much"; the dependency's own error says nothing about its load (cancelled).
      if (!e.failed) {
        r.limit_permit->complete(Nanos(e.t - r.attempt_started));
      } else if (e.timed_out || e.refused) {
        r.limit_permit->drop();
      } else {
        r.limit_permit->cancel();
      }
      r.limit_permit.reset();
    }
    const Outcome outcome = e.failed ? Outcome::failure : Outcome::success;
    if constexpr (kHasBreaker) {
      if (config_.breaker_scope == BreakerScope::attempt && r.permit) {
        r.permit->record(outcome, Nanos(e.t - r.attempt_started));
        r.permit.reset();
      }
    }
    if (!e.failed) return finish(e.req, e.t, std::nullopt);
    const Reason own = e.timed_out ? Reason::timeout : Reason::call_error;
    if (!retry_) return finish(e.req, e.t, own);
    const std::uint64_t bits = retry_->needs_random() ? retry_->random_bits() : 0;
    const std::optional<Nanos> hint = std::exchange(r.retry_after, std::nullopt);
    const RetryDecision d =
        retry_->decide(r.attempts, r.previous_delay, hint, e.t, Deadline::never(), bits);
    switch (d.verdict) {
      case RetryDecision::Verdict::exhausted:
        return finish(e.req, e.t, Reason::retries_exhausted);
      case RetryDecision::Verdict::deadline_exceeded:
        return finish(e.req, e.t, Reason::deadline_exceeded);
      case RetryDecision::Verdict::retry:
        break;
    }
    if (budget_) {
      auto ticket = budget_->try_withdraw();
      if (!ticket) return finish(e.req, e.t, Reason::budget_exhausted);
      r.ticket.emplace(std::move(*ticket));  // spent while it waits; refunded if no retry
    }
    r.previous_delay = d.delay;
    push(saturating_add(e.t, d.delay.count()), e.req, Kind::retry);
  }

  // The call is over: success (no reason) or a failure with its reason.
  void finish(std::uint32_t id, Ticks t, std::optional<Reason> reason) {
    Request& r = requests_[id];
    if (r.permit) {
      // Whole-call scope: the outcome of the last attempt, timed from admission. No
      // attempt ran (the bulkhead said no): dropping the permit cancels it.
      if (r.attempts > 0) {
        r.permit->record(reason ? Outcome::failure : Outcome::success, Nanos(t - r.admitted));
      }
      r.permit.reset();
    }
    r.ticket.reset();
    r.limit_permit.reset();
    const bool freed = r.slot.has_value();
    r.slot.reset();
    PageResult result = PageResult::full;
    if (reason) {
      ++result_.reasons[static_cast<std::size_t>(*reason)];
      result = config_.fallback && config_.fallback->contains(*reason) ? PageResult::degraded
                                                                       : PageResult::failed;
    }
    if (scenario_.caller.work > Nanos::zero()) {
      push(saturating_add(t, scenario_.caller.work.count()), id, Kind::page_done, false, false,
           result);
    } else {
      page_done(id, t, result);
    }
    if (freed) grant_waiters(t);
  }

  // A slot came free: the longest waiter still waiting takes it.
  void grant_waiters(Ticks t) {
    while (!waiters_.empty()) {
      const Waiter w = waiters_.front();
      Request& r = requests_[w.req];
      if (!r.active || r.gen != w.gen || !r.waiting) {
        waiters_.pop();
        continue;
      }
      auto slot = bulkhead_->try_acquire();
      if (!slot) return;
      waiters_.pop();
      r.waiting = false;
      r.slot.emplace(std::move(*slot));
      begin_attempts(w.req, t);
    }
  }

  void page_done(std::uint32_t id, Ticks t, PageResult result) {
    Request& r = requests_[id];
    --busy_;
    latency_.add(Nanos(t - r.arrived));
    switch (result) {
      case PageResult::full:
        if (server_) success_latency_.add(Nanos(t - r.arrived));
        ++result_.served_full, ++step().full;
        break;
      case PageResult::degraded:
        ++result_.served_degraded, ++step().degraded;
        break;
      case PageResult::failed:
        ++result_.failed, ++step().failed;
        break;
    }
    release(id);
  }

  // ---- the server ------------------------------------------------------------------

  struct Job {
    Ticks service = 0;
    std::uint32_t req = 0;
    std::uint32_t gen = 0;
    bool failed = false;
    std::uint32_t permit = kNoPermit;  // the shedder's, held until it is served
  };

  // The attempt goes to the server: served now by a free worker, queued, or refused.
  void submit(std::uint32_t id, Ticks t, const Phase& phase, SplitMix64& g) {
    Request& r = requests_[id];
    const bool failed = unit_interval(g()) < phase.error_rate;
    const Nanos service =
        sample(phase.service_time ? *phase.service_time : server_->service_time, g);
    r.attempt_started = t;
    ++in_flight_;  // until its attempt_done, even a refused one's at once
    ++result_.calls;
    ++step().calls;
    if (phase.degraded) ++result_.calls_while_degraded;
    const Job job{service.count(), id, r.gen, failed};
    if (shedder_) {
      r.attempt_deadline =
          config_.timeout ? saturating_add(t, config_.timeout->count()) : kTicksMax;
      if (!shed_submit(job, t)) return;
    } else if (!to_server(job, t)) {
      return;
    }
    note_levels();
    if (config_.timeout)
      push(saturating_add(t, config_.timeout->count()), id, Kind::attempt_done, true, true);
  }

  // The server takes the attempt: a free worker, its queue, or refused (false: the
  // attempt has failed at once; a shedder's permit is given back as a drop).
  bool to_server(const Job& job, Ticks t) {
    pump(t);
    if (server_busy_ < capacity(phase_at(t)) && queued_ == 0) {
      serve(job, t);
    } else if (queued_ < server_->queue) {
      queue_.push(job);
      ++queued_;
      note_queued();
    } else {
      ++result_.refused;  // refused at once: a fast failure, never in flight for long
      let_go(job.permit, true);
      push_refusal(t, job.req);
      return false;
    }
    return true;
  }

  void note_queued() {
    result_.peak_queued = std::max(result_.peak_queued, queued_ + shed_queued_);
  }

  // ---- the shedder in front of the server -------------------------------------------
  //
  // Admission, the limit, the deadline check and the permits' accounting (service time,
  // the limit's samples) are the library's: try_acquire() under the simulation's clock.
  // acquire() blocks, so its queue is modelled here as load_shedder.h describes it: a
  // waiter's expiry is fixed when it queues (controlled delay, or its deadline minus the
  // expected service time), a freed permit goes to the oldest waiter, or the newest
  // while the queue stands (not empty for `interval`), and the refusal's hint is the
  // library's formula.

  struct ShedWaiter {
    Job job;
  };

  BasicContext<ManualClock> shed_context(const Request& r) const {
    BasicContext<ManualClock> ctx(clock_);
    if (r.attempt_deadline != kTicksMax) return ctx.with_deadline(Deadline::at(r.attempt_deadline));
    return ctx;
  }

  // Admitted (and sent to the server), queued, or refused at once (false).
  bool shed_submit(Job job, Ticks t) {
    Request& r = requests_[job.req];
    auto p = shedder_->try_acquire(shed_context(r), Priority::normal);
    if (p) {
      job.permit = hold(std::move(*p));
      if (to_server(job, t)) return true;
      shed_dispatch(t);
      return false;
    }
    const LoadShedderConfig& c = shedder_->config();
    if (p.error().reason == ShedReason::deadline_too_short || shed_queued_ >= c.max_queue) {
      shed_refuse(job.req, t, p.error().retry_after);
      return false;
    }
    if (shed_queued_ == 0) shed_last_empty_ = t;
    Ticks expires = std::min(saturating_add(t, c.interval.count()),
                             std::max(saturating_add(shed_last_empty_, c.interval.count()),
                                      saturating_add(t, c.target_delay.count())));
    bool deadline = false;
    if (r.attempt_deadline != kTicksMax) {
      const Ticks cutoff = saturating_sub(r.attempt_deadline, shedder_->service_time().count());
      if (cutoff < expires) expires = cutoff, deadline = true;
    }
    shed_queue_.push_back({job});
    ++shed_queued_;
    note_queued();
    r.shed_waiting = true;
    r.shed_since = t;
    push(expires, job.req, Kind::shed_expired, false, deadline);
    return true;
  }

  // The 503: a fast failure, with the shedder's Retry-After for the caller's retry.
  void shed_refuse(std::uint32_t id, Ticks t, Nanos retry_after) {
    ++result_.shed;
    requests_[id].retry_after = retry_after;
    push_refusal(t, id);
  }

  // The attempt was refused at once, by the server or its shedder: a failure, and an
  // overload signal.
  void push_refusal(Ticks t, std::uint32_t id) {
    heap_push(Event{t, seq_++, id, requests_[id].gen, Kind::attempt_done, true, false, true});
  }

  void leave_shed_queue(Request& r, Ticks t) {
    r.shed_waiting = false;
    if (--shed_queued_ == 0) {
      shed_last_empty_ = t;
      shed_queue_.clear();  // only stale entries are left
    }
  }

  // A waiter's time has come: the controlled delay, or its deadline (timed_out).
  void shed_expire(const Event& e) {
    Request& r = requests_[e.req];
    leave_shed_queue(r, e.t);
    if (!e.timed_out) shedder_->limit_source().on_queue_timeout(Nanos(e.t - r.shed_since));
    const LoadShedderConfig& c = shedder_->config();
    const Ticks limit =
        static_cast<Ticks>(std::max<std::size_t>(1, shedder_->limit_source().limit()));
    const Nanos drain(shedder_->service_time().count() / limit *
                      static_cast<Ticks>(shed_queued_ + 1));
    shed_refuse(e.req, e.t, std::clamp(drain, c.min_retry_after, c.max_retry_after));
  }

  // Permits came free: waiters take them, oldest first, newest first while the queue
  // stands.
  void shed_dispatch(Ticks t) {
    if (!shedder_ || shed_queued_ == 0) return;
    const bool lifo = t - shed_last_empty_ >= shedder_->config().interval.count();
    while (shed_queued_ > 0 && shedder_->in_flight() < shedder_->class_limit(Priority::normal)) {
      Job job = (lifo ? shed_queue_.back() : shed_queue_.front()).job;
      lifo ? shed_queue_.pop_back() : shed_queue_.pop_front();
      Request& r = requests_[job.req];
      if (!r.active || r.gen != job.gen || !r.shed_waiting) continue;  // stale
      leave_shed_queue(r, t);
      auto p = shedder_->try_acquire(shed_context(r), Priority::normal);
      if (!p) {
        shed_refuse(job.req, t, p.error().retry_after);
        continue;
      }
      job.permit = hold(std::move(*p));
      to_server(job, t);
    }
  }

  std::uint32_t hold(typename Shedder::Permit p) {
    std::uint32_t i = 0;
    if (!shed_free_.empty()) {
      i = shed_free_.back();
      shed_free_.pop_back();
    } else {
      i = static_cast<std::uint32_t>(shed_permits_.size());
      shed_permits_.emplace_back();
    }
    shed_permits_[i].emplace(std::move(p));
    return i;
  }

  // Gives a permit back: a drop if the server refused the call (an overload signal);
  // served, even with an error of its own, it is a service-time sample (the library's
  // permit adds a drop if that was past the request's deadline).
  void let_go(std::uint32_t i, bool dropped) {
    if (i == kNoPermit) return;
    if (dropped) shed_permits_[i]->drop();
    shed_permits_[i].reset();
    shed_free_.push_back(i);
  }

  std::uint32_t capacity(const Phase& phase) const {
    return phase.workers.value_or(server_->workers);
  }

  void serve(const Job& job, Ticks t) {
    ++server_busy_;
    heap_push(Event{saturating_add(t, job.service), seq_++, job.req, job.gen, Kind::server_done,
                    job.failed, false, false, PageResult::full, job.permit});
  }

  // Queued attempts take the workers free (the phase's number may have grown).
  void pump(Ticks t) {
    const std::uint32_t n = capacity(phase_at(t));
    while (queued_ > 0 && server_busy_ < n) {
      const Job job = queue_.front();
      queue_.pop();
      --queued_;
      serve(job, t);
    }
  }

  void on_server_done(const Event& e) {
    --server_busy_;
    let_go(e.permit, false);  // dropped if served past the attempt's deadline
    if (live(e)) {
      on_attempt_done(e);
    } else {
      ++result_.wasted;  // the caller gave up on it (or the page is over)
    }
    pump(e.t);
    shed_dispatch(e.t);
  }

  void summarize_limit() {
    const auto& phases = scenario_.dependency.phases;
    const Ticks first_end = phases.size() > 1 ? phases[1].start.count() : end();
    double sum = 0;
    std::uint32_t n = 0, lowest = std::numeric_limits<std::uint32_t>::max();
    for (const TimelineStep& st : result_.timeline) {
      if (!st.limit) continue;
      lowest = std::min(lowest, *st.limit);
      if (st.start.count() >= first_end / 2 && st.start.count() + step_ <= first_end) {
        sum += *st.limit, ++n;
      }
    }
    if (n > 0) result_.limit_settled = sum / n;
    if (lowest != std::numeric_limits<std::uint32_t>::max()) result_.limit_lowest = lowest;
  }

  // Goodput after the trigger, the successful pages' p99 and the goal.
  void summarize_load(Ticks end) {
    result_.success_p99 = success_latency_.quantile(0.99);
    if (!scenario_.degraded_from()) return;
    const Ticks trigger_end = scenario_.degraded_until().count();
    if (trigger_end < end) {
      const auto& steps = result_.timeline;
      std::size_t from = steps.size();
      for (std::size_t i = steps.size(); i-- > 0;) {
        if (steps[i].start.count() < trigger_end) break;
        const TimelineStep& st = steps[i];
        if (20 * st.full < 19 * (st.full + st.degraded + st.failed + st.lost)) break;
        from = i;
      }
      if (from < steps.size())
        result_.recovered_after = Nanos(steps[from].start.count() - trigger_end);
    }
    if (config_.goal && (config_.goal->overloaded_to_end || config_.goal->recover_within)) {
      result_.goal_met = config_.goal->overloaded_to_end
                             ? !result_.recovered_after
                             : result_.recovered_after &&
                                   *result_.recovered_after <= *config_.goal->recover_within;
    }
  }

  // ---- bookkeeping ---------------------------------------------------------------

  std::uint32_t allocate() {
    std::uint32_t id = 0;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<std::uint32_t>(requests_.size());
      requests_.emplace_back();
    }
    Request& r = requests_[id];
    r.active = true;
    r.attempts = 0;
    r.previous_delay = Nanos::zero();
    r.waiting = false;
    r.shed_waiting = false;
    r.retry_after.reset();
    return id;
  }

  void release(std::uint32_t id) {
    Request& r = requests_[id];
    r.active = false;
    ++r.gen;  // events still queued for this use are now stale
    free_.push_back(id);
  }

  // The phase in effect at `t`, the current time: the last one started by then (the
  // first before any has). Times only grow, so a cursor moves forward over the phases.
  const Phase& phase_at(Ticks t) {
    const auto& phases = scenario_.dependency.phases;
    while (phase_ + 1 < phases.size() && phases[phase_ + 1].start.count() <= t) ++phase_;
    return phases[phase_];
  }

  void summarize_breaker(Ticks end) {
    if (!result_.has_breaker) return;
    const std::optional<Nanos> degraded = scenario_.degraded_from();
    // Stretches away from CLOSED (plain values: GCC 12 misjudges an optional here).
    bool away = false;
    Nanos away_since = Nanos::zero();
    auto close_stretch = [&](Nanos until) {
      if (!away) return;
      const Nanos length = until - away_since;
      result_.longest_open = std::max(result_.longest_open, length);
      if (config_.alert_when_open_for && !result_.alert_at &&
          length >= *config_.alert_when_open_for)
        result_.alert_at = away_since + *config_.alert_when_open_for;
      away = false;
    };
    for (const BreakerTransition& tr : result_.transitions) {
      const bool opened = tr.to == State::open || tr.to == State::forced_open;
      // As the breaker's own `opens` counts: every opening, reopenings after a failed
      // probe included.
      if (opened && tr.from != State::open && tr.from != State::forced_open) ++result_.opens;
      if (opened && degraded && tr.at >= *degraded && !result_.time_to_open) {
        result_.time_to_open = tr.at - *degraded;
      }
      if (tr.from == State::closed && tr.to != State::closed) away = true, away_since = tr.at;
      if (tr.to == State::closed) close_stretch(tr.at);
    }
    close_stretch(Nanos(end));
  }

  static constexpr std::size_t kMaxSteps = 1'000'000;

  const Scenario& scenario_;
  const ResilienceConfig& config_;
  const Ticks step_;
  static constexpr std::uint32_t kProgressEvery = 1u << 18;
  decltype(SimulateOptions::progress) progress_;
  void* progress_context_;

  // The library objects first: requests hold permits on them and go before them.
  ManualClock clock_;
  std::unique_ptr<B> breaker_;
  std::optional<Bulkhead> bulkhead_;
  std::optional<Limit> limit_;
  std::optional<BasicThrottle<ManualClock>> throttle_;
  std::optional<RetryPolicy> retry_;
  std::optional<Budget> budget_;
  std::optional<Limit> shed_limiter_;  // the shedder's adaptive limit
  std::optional<Shedder> shedder_;
  std::vector<std::optional<typename Shedder::Permit>> shed_permits_;  // held by server jobs
  std::vector<std::uint32_t> shed_free_;

  ConfigurationResult result_;
  static constexpr Ticks kNoArrival = std::numeric_limits<Ticks>::max();
  Ticks next_arrival_ = kNoArrival;
  std::vector<Event> heap_;  // attempt_done and retry
  Fifo<Event> pages_;        // page_done
  Fifo<Event> expiries_;     // wait_expired
  std::vector<Request> requests_;
  std::vector<std::uint32_t> free_;
  Fifo<Waiter> waiters_;
  Histogram latency_;
  TimelineStep scratch_;
  bool draining_ = false;
  SplitMix64 arrivals_rng_{0};
  double next_poisson_ = 0;
  std::uint64_t arrival_index_ = 0;
  std::uint64_t draws_seed_ = 0;
  std::size_t phase_ = 0;
  std::uint64_t seq_ = 0;
  std::uint32_t in_flight_ = 0;
  std::uint32_t busy_ = 0;

  // The server (none without [dependency.server]).
  const Server* server_ = nullptr;
  Fifo<Job> queue_;
  std::uint32_t queued_ = 0;
  std::uint32_t server_busy_ = 0;
  std::deque<ShedWaiter> shed_queue_;  // with stale entries, skipped when reached
  std::uint32_t shed_queued_ = 0;      // live waiters
  Ticks shed_last_empty_ = 0;
  Histogram success_latency_;
  bool varying_rate_ = false;
};

}  // namespace bulwark::lab::detail

#endif  // BULWARK_LAB_SRC_SIMULATION_H_
