// bulwark/load_shedder.h — a service's own entry point, protected from overload.
//
// A bulkhead guards a dependency; a load shedder guards the service itself. It caps
// the requests being served at a limit (fixed, or adaptive through a LimitSource),
// keeps headroom per priority class so that a health check or a critical route is
// never refused while a sheddable one is served, queues the excess for at most a
// controlled delay (CoDel as Facebook applies it to RPC queues) and serves that queue
// LIFO under overload, and refuses at once a request whose deadline is shorter than
// the expected service time. Every refusal says why and carries a Retry-After hint.
//
//   bulwark::LoadShedder shedder({.name = "api"}, bulwark::FixedLimit(64));
//
//   auto admitted = shedder.acquire(ctx, bulwark::Priority::normal);  // may queue
//   if (!admitted) {                               // 503 + Retry-After
//     res.status = shedder.config().http_status;
//     res.set_header("Retry-After",
//                    std::to_string(bulwark::retry_after_seconds(admitted.error().retry_after)));
//     return;
//   }
//   handle(req, res);                              // the permit is released here
//
// Admission. A class may hold at most its share of the limit L (critical: all of L,
// normal: normal_share of L, sheddable: sheddable_share of L), so as utilisation rises
// sheddable requests are refused first (reason `priority` while slots are still free
// for the classes above), then normal ones, and the last slots stay for critical ones.
//
// Queueing (acquire() only; try_acquire() never waits). Critical and normal requests
// that find their class full wait in a bounded queue; sheddable ones are refused at
// once. Controlled delay: while the queue has been empty within the last `interval`
// a waiter may wait up to `interval`; once it has not (the queue is standing, the
// service is overloaded) a waiter is refused after `target_delay` (queue_timeout), and
// the queue is served newest first (LIFO), so that the requests served are those whose
// callers are still waiting. Critical waiters are served before normal ones. A waiter
// whose deadline minus the expected service time comes first is refused then
// (deadline_too_short).
//
// Deadline awareness. The expected service time is an EWMA of the times permits were
// held (updated lazily on release). A request whose context has less time left than
// that, or none, is refused at once (deadline_too_short); half the time it had left
// is folded into the estimate, so that an estimate above what callers allow decays until
// a request is admitted and measures the service again.
//
// Cost. try_acquire() and the fast path of acquire(): one atomic load of the limit's
// state (FixedLimit: a plain field), one load and one CAS on the in-flight count, a
// relaxed counter increment and a clock read (the permit's start time); a deadline
// check reads the clock once more. No lock, no allocation. Releasing: a clock read, the
// EWMA update (a CAS), the LimitSource's on_sample(), one atomic subtract and one
// load; plus the mutex only when requests are queued. Without the two clock reads
// admission + release costs about twice a bulkhead's (docs/performance.md); the reads
// dominate where the precise clock is slow, and `coarse_timing` makes them cheap. Waiting (the slow
// path): the mutex, and a condition variable per waiter on the waiter's own stack (no allocation);
// the waiter is woken only when it is granted a slot or refused. Each release with
// waiters queued scans the queue for expired waiters: O(max_queue) under the mutex.
// No thread is created: a waiter waits on its own thread. Waits are in real time
// (capped at `interval` per sleep) and expire by the injected clock: with a
// ManualClock a waiter expires when the clock has been advanced past its expiry and
// then poll() (or any release or arrival) runs, or its own capped sleep ends.
//
// Thread-safety: every member function may be called concurrently from any thread.
// The LimitSource's limit() and on_sample() are called concurrently and must be
// thread-safe. A Permit belongs to one request; move it, don't share it. Destroying
// the shedder while permits are out or requests are waiting is a precondition
// violation.

#ifndef BULWARK_LOAD_SHEDDER_H_
#define BULWARK_LOAD_SHEDDER_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/context.h"
#include "bulwark/detail/permit_base.h"
#include "bulwark/expected.h"

namespace bulwark {

// Where the concurrency limit comes from. limit() is read on every admission (keep it
// to an atomic load); on_sample() is told, on the releasing thread, how long each
// admitted request held its slot and whether it was dropped (the caller said so with
// Permit::drop(), or it was released after its context's deadline). Both are called
// concurrently from any thread. Optional members, used when present:
//   on_sample(rtt, dropped, in_flight)  instead of the two-argument one; in_flight is the
//                                       count of requests held when this one was admitted
//   on_queue_timeout(waited)            a waiter was refused by the controlled delay
// AdaptiveLimitSource (adaptive_limit.h) has both.
template <class L>
concept LimitSource = requires(L& l, const L& cl, Nanos rtt, bool dropped) {
  { cl.limit() } -> std::convertible_to<std::size_t>;
  l.on_sample(rtt, dropped);
};

// A limit that never changes. on_sample() does nothing.
class FixedLimit {
 public:
  constexpr explicit FixedLimit(std::size_t limit = 64) noexcept : limit_(limit) {}
  constexpr std::size_t limit() const noexcept { return limit_; }
  constexpr void on_sample(Nanos, bool) noexcept {}

 private:
  std::size_t limit_;
};
static_assert(LimitSource<FixedLimit>);

// Lower value = more important. A class is never refused while a less important one
// is admitted with the same in-flight count.
enum class Priority : std::uint8_t {
  critical = 0,   // health checks, control plane: may use the whole limit
  normal = 1,     // ordinary requests: normal_share of the limit
  sheddable = 2,  // best effort (prefetch, analytics): sheddable_share, never queued
};
inline constexpr std::size_t kPriorityCount = 3;

constexpr std::string_view to_string(Priority p) noexcept {
  switch (p) {
    case Priority::critical:
      return "critical";
    case Priority::normal:
      return "normal";
    case Priority::sheddable:
      return "sheddable";
  }
  return "unknown";
}

enum class ShedReason : std::uint8_t {
  overloaded,          // the limit is reached and the request could not queue
  queue_timeout,       // it waited in the queue past the controlled delay
  deadline_too_short,  // less time left than the expected service time
  priority,            // slots are free, but reserved for more important classes
};
inline constexpr std::size_t kShedReasonCount = 4;

constexpr std::string_view to_string(ShedReason r) noexcept {
  switch (r) {
    case ShedReason::overloaded:
      return "overloaded";
    case ShedReason::queue_timeout:
      return "queue_timeout";
    case ShedReason::deadline_too_short:
      return "deadline_too_short";
    case ShedReason::priority:
      return "priority";
  }
  return "unknown";
}

// Why a request was refused, and when its caller may try again.
struct Refusal {
  ShedReason reason;
  Priority priority;
  Nanos retry_after;  // the hint: min_retry_after, longer when a queue stands
};

// The Retry-After header's value: whole seconds, rounded up, at least 1.
constexpr std::uint64_t retry_after_seconds(Nanos hint) noexcept {
  const auto s = std::chrono::ceil<std::chrono::seconds>(hint).count();
  return s < 1 ? 1 : static_cast<std::uint64_t>(s);
}

struct LoadShedderConfig {
  // Identifies the shedder in errors and metrics.
  std::string name = "default";
  // The fraction of the limit each class may hold, in (0, 1]; critical holds all of it.
  // sheddable_share <= normal_share. A non-zero share of a limit >= 1 is at least 1 slot.
  double normal_share = 0.9;
  double sheddable_share = 0.5;
  // Requests that may wait at once; 0 refuses at once instead of queueing.
  std::size_t max_queue = 128;
  // Controlled delay: a standing queue (not empty within `interval`) refuses waiters
  // older than `target_delay`; otherwise a waiter may wait up to `interval`.
  // 0 < target_delay <= interval.
  Nanos target_delay = std::chrono::milliseconds(5);
  Nanos interval = std::chrono::milliseconds(100);
  // The expected service time before any request has finished (>= 0), and the EWMA
  // weight of each new sample, in (0, 1].
  Nanos initial_service_time = Nanos::zero();
  double service_time_weight = 0.1;
  // Retry-After hint: min_retry_after, or the expected time to drain the queue if
  // longer, at most max_retry_after. 0 < min <= max.
  Nanos min_retry_after = std::chrono::seconds(1);
  Nanos max_retry_after = std::chrono::seconds(30);
  // Time permits with the clock's coarse reading (SteadyClock: CLOCK_MONOTONIC_COARSE,
  // 1-4 ms resolution), several times cheaper than a precise one: fine for the deadline
  // check's EWMA over many requests, too coarse for an adaptive limit's RTT samples.
  bool coarse_timing = false;
  // The HTTP status of a refusal: 503 (Service Unavailable) or 429 (Too Many Requests).
  int http_status = 503;
};

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const LoadShedderConfig& config);

// Each field is read atomically, not all at once.
struct LoadShedderSnapshot {
  std::size_t limit = 0;               // the LimitSource's limit now
  std::size_t in_flight = 0;           // permits held now
  std::size_t queued = 0;              // requests waiting now
  bool overloaded = false;             // the queue is standing (LIFO, target_delay)
  Nanos service_time = Nanos::zero();  // the expected service time (EWMA)
  std::array<std::uint64_t, kPriorityCount> admitted{};   // totals, by Priority
  std::array<std::uint64_t, kShedReasonCount> refused{};  // totals, by ShedReason
  std::uint64_t queued_total = 0;                         // requests that entered the queue
};

template <LimitSource L = FixedLimit, Clock C = SteadyClock>
class BasicLoadShedder {
  struct PermitData {
    Ticks start = 0;
    Ticks deadline = kTicksMax;  // the request's: released after it, the permit is a drop
    std::size_t in_flight = 0;   // held when it was admitted, itself included
  };
  struct PermitTraits {
    using Owner = BasicLoadShedder;
    using Data = PermitData;
    static void abandon(BasicLoadShedder& s, const Data& d) noexcept { s.give_back(d, false); }
  };

 public:
  using clock_type = C;
  using limit_type = L;

  // One admitted request. Move-only; the slot goes back, and the service time is
  // sampled, when the permit is destroyed, release()d or drop()ped.
  class [[nodiscard]] Permit : public detail::PermitBase<PermitTraits> {
   public:
    // Gives the slot back now. Idempotent.
    void release() noexcept { this->abandon(); }
    // Gives the slot back, telling the LimitSource the request was dropped (it timed
    // out or failed because the service is overloaded). Idempotent.
    void drop() noexcept {
      if (BasicLoadShedder* s = this->take()) s->give_back(this->data(), true);
    }

   private:
    friend class BasicLoadShedder;
    Permit(BasicLoadShedder* s, PermitData d) noexcept : detail::PermitBase<PermitTraits>(s, d) {}
  };

  using Result = Expected<Permit, Refusal>;

  // Validates `config` (throws InvalidConfig naming the field). A stateful clock must
  // outlive the shedder.
  explicit BasicLoadShedder(LoadShedderConfig config, L limit = L{}) requires std::is_empty_v<C>
      : BasicLoadShedder(std::move(config), std::move(limit), static_cast<const C&>(C{})) {}
  BasicLoadShedder(LoadShedderConfig config, L limit, const C& clock)
      : config_(checked(std::move(config))),
        clock_(clock),
        limit_(std::move(limit)),
        normal_permille_(permille(config_.normal_share)),
        sheddable_permille_(permille(config_.sheddable_share)),
        service_ns_(config_.initial_service_time.count()) {}
  BasicLoadShedder(LoadShedderConfig, L, const C&&) = delete;
  BasicLoadShedder(const BasicLoadShedder&) = delete;
  BasicLoadShedder& operator=(const BasicLoadShedder&) = delete;
  ~BasicLoadShedder() = default;

  // Admits the request if its class has a free slot and its deadline allows; never
  // waits, never locks, never allocates.
  Result try_acquire(const BasicContext<C>& ctx, Priority p) noexcept {
    if (too_short(ctx)) return refuse(ShedReason::deadline_too_short, p);
    if (const std::size_t n = take(p)) return admit(p, n, ctx.deadline());
    return refuse(full_reason(p), p);
  }
  Result try_acquire(Priority p) noexcept { return try_acquire(BasicContext<C>(clock_.get()), p); }

  // try_acquire(), or else (critical and normal only) waits in the queue until a slot
  // is granted, the controlled delay refuses it, or its deadline leaves less than the
  // expected service time. Blocks the calling thread; creates none.
  Result acquire(const BasicContext<C>& ctx, Priority p) {
    if (too_short(ctx)) return refuse(ShedReason::deadline_too_short, p);
    if (const std::size_t n = take(p)) return admit(p, n, ctx.deadline());
    if (p == Priority::sheddable || config_.max_queue == 0) return refuse(full_reason(p), p);
    return wait(ctx, p);
  }
  Result acquire(Priority p) { return acquire(BasicContext<C>(clock_.get()), p); }

  // Refuses the waiters whose time has come by the clock and grants free slots to
  // waiters. Releases and arrivals do this; call it after advancing a ManualClock.
  void poll() {
    if (queued_.load(std::memory_order_seq_cst) == 0) return;
    std::lock_guard lock(mu_);
    dispatch(now());
  }

  LoadShedderSnapshot snapshot() const noexcept {
    LoadShedderSnapshot s;
    s.limit = limit_.limit();
    s.in_flight = in_flight_.load(std::memory_order_relaxed);
    s.queued = queued_.load(std::memory_order_relaxed);
    s.overloaded =
        s.queued != 0 && saturating_sub(now(), last_empty_.load(std::memory_order_relaxed)) >=
                             config_.interval.count();
    s.service_time = service_time();
    for (std::size_t i = 0; i < kPriorityCount; ++i)
      s.admitted[i] = admitted_[i].load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < kShedReasonCount; ++i)
      s.refused[i] = refused_[i].load(std::memory_order_relaxed);
    s.queued_total = queued_total_.load(std::memory_order_relaxed);
    return s;
  }
  std::size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
  std::size_t queued() const noexcept { return queued_.load(std::memory_order_relaxed); }
  Nanos service_time() const noexcept { return Nanos(service_ns_.load(std::memory_order_relaxed)); }
  // The most requests of class `p` that may be in flight under the current limit.
  std::size_t class_limit(Priority p) const noexcept { return cap(p, limit_.limit()); }
  const LoadShedderConfig& config() const noexcept { return config_; }
  L& limit_source() noexcept { return limit_; }
  const L& limit_source() const noexcept { return limit_; }

 private:
  struct Waiter {
    Waiter* prev = nullptr;
    Waiter* next = nullptr;
    Ticks expires = kTicksMax;
    ShedReason expiry_reason = ShedReason::queue_timeout;
    enum class State : std::uint8_t { waiting, granted, refused } state = State::waiting;
    ShedReason refused_reason = ShedReason::queue_timeout;
    std::size_t granted_in_flight = 0;  // take()'s count when it was granted
    std::condition_variable cv;
  };
  struct List {
    Waiter* head = nullptr;
    Waiter* tail = nullptr;
    void push_back(Waiter* w) noexcept {
      w->prev = tail;
      w->next = nullptr;
      (tail ? tail->next : head) = w;
      tail = w;
    }
    void unlink(Waiter* w) noexcept {
      (w->prev ? w->prev->next : head) = w->next;
      (w->next ? w->next->prev : tail) = w->prev;
      w->prev = w->next = nullptr;
    }
  };

  static LoadShedderConfig checked(LoadShedderConfig config) {
    if (auto ok = validate(config); !ok) detail::raise_config_error(std::move(ok).error());
    return config;
  }
  static std::uint32_t permille(double share) noexcept {
    return static_cast<std::uint32_t>(std::clamp(share, 0.0, 1.0) * 1000.0 + 0.5);
  }
  std::size_t cap(Priority p, std::size_t limit) const noexcept {
    if (p == Priority::critical) return limit;
    const std::uint32_t share = p == Priority::normal ? normal_permille_ : sheddable_permille_;
    const std::size_t c = limit * share / 1000;
    return c == 0 && share != 0 && limit != 0 ? 1 : c;
  }
  Ticks now() const noexcept { return now_ticks(clock_.get()); }
  Ticks permit_now() const noexcept {
    return config_.coarse_timing ? coarse_now_ticks(clock_.get()) : now_ticks(clock_.get());
  }

  // A refusal folds half the time the caller had left into the estimate: only admitted
  // requests measure the service time, so an estimate that rose above what callers
  // allow would otherwise refuse them all forever. Refusals pull it down (below what
  // they had, so it gets there) until one is admitted again and measures the real time.
  bool too_short(const BasicContext<C>& ctx) noexcept {
    if (!ctx.has_deadline()) return false;
    const Nanos left = ctx.remaining();
    if (left <= Nanos::zero()) return true;
    if (left >= service_time()) return false;
    sample(left / 2);
    return true;
  }

  // Lazy EWMA: a sample that loses the race to another is folded in on the next try.
  void sample(Nanos rtt) noexcept {
    Ticks est = service_ns_.load(std::memory_order_relaxed);
    for (;;) {
      const Ticks next = est + static_cast<Ticks>(config_.service_time_weight *
                                                  static_cast<double>(rtt.count() - est));
      if (service_ns_.compare_exchange_weak(est, next, std::memory_order_relaxed)) break;
    }
  }

  // The one atomic step: increment only below the class's cap, so the count never
  // exceeds the limit. seq_cst pairs with give_back(): a waiter publishes queued_ and
  // then takes; a releaser lowers in_flight_ and then reads queued_. One sees the other.
  // Returns the count held after the take (this one included), 0 if refused.
  std::size_t take(Priority p) noexcept {
    const std::size_t c = cap(p, limit_.limit());
    std::size_t cur = in_flight_.load(std::memory_order_seq_cst);
    while (cur < c) {
      if (in_flight_.compare_exchange_weak(cur, cur + 1, std::memory_order_seq_cst)) return cur + 1;
    }
    return 0;
  }
  ShedReason full_reason(Priority p) const noexcept {
    return p != Priority::critical && in_flight_.load(std::memory_order_relaxed) < limit_.limit()
               ? ShedReason::priority
               : ShedReason::overloaded;
  }

  Permit admit(Priority p, std::size_t in_flight, Deadline deadline) noexcept {
    admitted_[static_cast<std::size_t>(p)].fetch_add(1, std::memory_order_relaxed);
    return Permit(this, PermitData{permit_now(), deadline.ticks(), in_flight});
  }

  Nanos retry_after_hint() const noexcept {
    const std::size_t limit = std::max<std::size_t>(1, limit_.limit());
    const std::size_t waiting = queued_.load(std::memory_order_relaxed);
    const Ticks drain =
        service_time().count() / static_cast<Ticks>(limit) * static_cast<Ticks>(waiting + 1);
    return std::clamp(Nanos(drain), config_.min_retry_after, config_.max_retry_after);
  }

  Unexpected<Refusal> refuse(ShedReason r, Priority p) noexcept {
    refused_[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
    return Unexpected(Refusal{r, p, retry_after_hint()});
  }

  void give_back(const PermitData& d, bool dropped) noexcept {
    const Ticks t = permit_now();
    const Nanos rtt(std::max<Ticks>(0, saturating_sub(t, d.start)));
    sample(rtt);
    // Served past its deadline: the caller had given up, the work was wasted.
    dropped = dropped || (d.deadline != kTicksMax && t > d.deadline);
    if constexpr (requires { limit_.on_sample(rtt, dropped, d.in_flight); }) {
      limit_.on_sample(rtt, dropped, d.in_flight);
    } else {
      limit_.on_sample(rtt, dropped);
    }
    in_flight_.fetch_sub(1, std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_seq_cst) != 0) {
      std::lock_guard lock(mu_);
      dispatch(now());
    }
  }

  bool standing(Ticks t) const noexcept {
    return queued_.load(std::memory_order_relaxed) != 0 &&
           saturating_sub(t, last_empty_.load(std::memory_order_relaxed)) >=
               config_.interval.count();
  }

  // Under mu_. Removes `w` from the queue and wakes it with `state`.
  void settle(Waiter* w, std::size_t cls, typename Waiter::State state, ShedReason why) noexcept {
    queues_[cls].unlink(w);
    queued_.fetch_sub(1, std::memory_order_seq_cst);
    w->state = state;
    w->refused_reason = why;
    w->cv.notify_one();
  }

  // Under mu_: refuse expired waiters, then grant free slots, critical first; newest
  // first while the queue is standing.
  void dispatch(Ticks t) noexcept {
    for (std::size_t cls = 0; cls < queues_.size(); ++cls) {
      for (Waiter* w = queues_[cls].head; w != nullptr;) {
        Waiter* next = w->next;
        if (t >= w->expires) settle(w, cls, Waiter::State::refused, w->expiry_reason);
        w = next;
      }
    }
    const bool lifo = standing(t);
    for (std::size_t cls = 0; cls < queues_.size(); ++cls) {
      List& q = queues_[cls];
      while (q.head != nullptr) {
        const std::size_t n = take(static_cast<Priority>(cls));
        if (n == 0) break;
        Waiter* w = lifo ? q.tail : q.head;
        w->granted_in_flight = n;
        settle(w, cls, Waiter::State::granted, ShedReason::overloaded);
      }
    }
  }

  Result wait(const BasicContext<C>& ctx, Priority p) {
    const auto cls = static_cast<std::size_t>(p);
    Waiter w;
    std::unique_lock lock(mu_);
    Ticks t = now();
    const Ticks arrived = t;
    if (queued_.load(std::memory_order_relaxed) >= config_.max_queue) {
      lock.unlock();
      return refuse(full_reason(p), p);
    }
    if (queued_.load(std::memory_order_relaxed) == 0)
      last_empty_.store(t, std::memory_order_relaxed);
    // The queue stays non-empty while `w` is in it, so the time it last was empty is
    // fixed: its controlled-delay expiry is known now.
    const Ticks since = last_empty_.load(std::memory_order_relaxed);
    w.expires = std::min(saturating_add(t, config_.interval.count()),
                         std::max(saturating_add(since, config_.interval.count()),
                                  saturating_add(t, config_.target_delay.count())));
    if (ctx.has_deadline()) {
      const Ticks cutoff = saturating_sub(ctx.deadline().ticks(), service_time().count());
      if (cutoff < w.expires) {
        w.expires = cutoff;
        w.expiry_reason = ShedReason::deadline_too_short;
      }
    }
    queues_[cls].push_back(&w);
    queued_.fetch_add(1, std::memory_order_seq_cst);
    queued_total_.fetch_add(1, std::memory_order_relaxed);
    dispatch(t);  // a slot freed before queued_ was published is granted here
    while (w.state == Waiter::State::waiting) {
      t = now();
      if (t >= w.expires) {
        settle(&w, cls, Waiter::State::refused, w.expiry_reason);
        break;
      }
      const Nanos sleep = std::min(Nanos(saturating_sub(w.expires, t)), config_.interval);
      w.cv.wait_for(lock, sleep);
    }
    if (queued_.load(std::memory_order_relaxed) == 0)
      last_empty_.store(now(), std::memory_order_relaxed);
    const bool granted = w.state == Waiter::State::granted;
    const ShedReason why = w.refused_reason;
    const Ticks left = now();
    lock.unlock();
    if (granted) return admit(p, w.granted_in_flight, ctx.deadline());
    if constexpr (requires { limit_.on_queue_timeout(Nanos::zero()); }) {
      if (why == ShedReason::queue_timeout)
        limit_.on_queue_timeout(Nanos(std::max<Ticks>(0, saturating_sub(left, arrived))));
    }
    return refuse(why, p);
  }

  const LoadShedderConfig config_;
  [[no_unique_address]] const detail::ClockRef<C> clock_;
  L limit_;
  const std::uint32_t normal_permille_;
  const std::uint32_t sheddable_permille_;
  alignas(64) std::atomic<std::size_t> in_flight_{0};
  std::atomic<std::size_t> queued_{0};
  std::array<std::atomic<std::uint64_t>, kPriorityCount> admitted_{};
  alignas(64) std::atomic<Ticks> service_ns_;
  std::atomic<Ticks> last_empty_{0};
  std::array<std::atomic<std::uint64_t>, kShedReasonCount> refused_{};
  std::atomic<std::uint64_t> queued_total_{0};
  std::mutex mu_;
  std::array<List, 2> queues_{};  // critical, normal (sheddable never queues)
};

using LoadShedder = BasicLoadShedder<FixedLimit, SteadyClock>;

namespace prometheus {
// Writes one shedder's snapshot as the bulwark_load_shedder_* families (label: name):
//   <p>_load_shedder_admitted_total{priority}   counter
//   <p>_load_shedder_refused_total{reason}      counter
//   <p>_load_shedder_queued_total               counter: requests that entered the queue
//   <p>_load_shedder_in_flight                  gauge
//   <p>_load_shedder_queue_length               gauge
//   <p>_load_shedder_limit                      gauge
//   <p>_load_shedder_overloaded                 gauge 1/0 (a standing queue)
//   <p>_load_shedder_service_time_seconds       gauge: the expected service time
// Families appear once per call: write several shedders in one call.
struct LoadShedderSeries {
  std::string_view name;
  LoadShedderSnapshot snapshot;
};
void write_load_shedders(std::ostream& out, const LoadShedderSeries* series, std::size_t count,
                         std::string_view prefix = "bulwark");
inline void write_load_shedder(std::ostream& out, std::string_view name,
                               const LoadShedderSnapshot& snapshot,
                               std::string_view prefix = "bulwark") {
  const LoadShedderSeries one{name, snapshot};
  write_load_shedders(out, &one, 1, prefix);
}
}  // namespace prometheus

}  // namespace bulwark

#endif  // BULWARK_LOAD_SHEDDER_H_
