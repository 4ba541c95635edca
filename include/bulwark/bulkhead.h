// bulwark/bulkhead.h — a cap on concurrent calls to one dependency.
//
// A slow dependency holds every thread that calls it. A bulkhead lets at most
// `max_concurrent` calls be in flight, so a slow dependency can only take its own
// slice of the caller's resources (a counting semaphore, like Resilience4j's
// SemaphoreBulkhead). When it is full a call is rejected at once, or waits up to
// `max_wait` — never past its context's deadline, and never after cancellation.
//
//   bulwark::Bulkhead pool({.name = "reviews", .max_concurrent = 80});
//
//   if (auto slot = pool.try_acquire()) {      // one CAS
//     call_reviews();
//   } else {                                    // slot.error().reason == full
//     respond_503();
//   }                                           // the slot goes back here, exactly once
//
//   auto slot = pool.acquire(ctx);              // may wait up to min(max_wait, ctx.remaining())
//
// Acquiring is one atomic step that returns a move-only RAII Permit: a permit cannot
// leak on an exception, cannot be released twice, and a waiter that times out holds
// nothing (it never had a slot). There is no check-then-increment window (Envoy's
// canCreate()/inc() can overshoot): the count never exceeds max_concurrent.
//
// Cost: try_acquire() is a load and a CAS; releasing is one atomic subtract and one
// load (plus a mutex and a notify only when a thread is waiting). No allocation.
// Waiting is the slow path: a mutex, a condition variable, and a stop_callback so that
// cancellation wakes the waiter at once. Waits are measured in real time (a steady
// condition variable): with a ManualClock, the time a waiter may wait is read once from
// that clock when it starts waiting.
//
// Striping (opt-in, BulkheadConfig::stripes > 1): the one count is a cache line every
// calling thread writes, so two threads on one bulkhead each pay for it. Striped, the
// max_concurrent slots are split over `stripes` counters, one line each (allocated at
// construction). A thread takes from its own stripe (a process-wide per-thread index,
// modulo stripes; live threads have distinct indices), and from the others in turn when
// its own is empty; its permit gives the slot back to the stripe it came from. A thread
// that acquires and releases on its own stripe writes no line another thread uses (a
// release only reads the waiter count, which nobody writes while nobody waits). The
// limit still holds exactly (each stripe keeps its own share, so the slots in flight
// never exceed max_concurrent), but admission is not: a try_acquire() may be refused
// while a slot is being given back to a stripe it had already looked at. in_use() and
// snapshot() sum the stripes (exact at rest). Waiting, deadlines and cancellation work
// as unstriped. stripes = 1 (the default) is exactly the single count above.
//
// Rejections can be observed: observe_rejections() sets a BulkheadObserver that is told
// of each refusal on the refusing thread, with no lock held (nothing is done for an
// admission). A registry sets one on the per-key bulkheads it builds, so that their
// rejections reach its event listeners with the key (registry.h, observe.h).
//
// Thread-safety: every member function may be called concurrently from any thread,
// except observe_rejections() (call it before the bulkhead is shared). A Permit belongs
// to one call; move it, don't share it.

#ifndef BULWARK_BULKHEAD_H_
#define BULWARK_BULKHEAD_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/context.h"
#include "bulwark/detail/permit_base.h"
#include "bulwark/detail/schedule_point.h"
#include "bulwark/detail/thread_slot.h"
#include "bulwark/expected.h"

namespace bulwark {

struct BulkheadConfig {
  // Identifies the bulkhead in errors and metrics.
  std::string name = "default";
  // Calls allowed in flight at once. >= 1. (Resilience4j's maxConcurrentCalls.)
  std::uint32_t max_concurrent = 25;
  // How long acquire() may wait for a slot when full; zero rejects at once.
  // (Resilience4j's maxWaitDuration.) >= 0.
  Nanos max_wait = Nanos::zero();
  // How many counters the max_concurrent slots are split over, 1..64. 1 (the default):
  // one shared count, exact admission. More: each thread takes from and gives back to
  // its own counter (its own cache line), so threads on one bulkhead don't write a
  // shared line; a thread whose counter is empty takes from the others. The limit is
  // still never exceeded, but a call may be refused while a slot is being given back
  // to a counter it had already looked at (see BasicBulkhead). Worth it only when
  // several threads call through one bulkhead at high rate.
  std::uint32_t stripes = 1;
};

// The most counters a bulkhead may be split over (BulkheadConfig::stripes).
inline constexpr std::uint32_t kMaxBulkheadStripes = 64;

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const BulkheadConfig& config);

enum class BulkheadRejectReason : std::uint8_t {
  full,               // no slot, and max_wait is zero or ran out
  deadline_exceeded,  // the context's deadline ended the wait (or had passed)
  cancelled,          // the context was cancelled before a slot came free
};

constexpr std::string_view to_string(BulkheadRejectReason r) noexcept {
  switch (r) {
    case BulkheadRejectReason::full:
      return "full";
    case BulkheadRejectReason::deadline_exceeded:
      return "deadline_exceeded";
    case BulkheadRejectReason::cancelled:
      return "cancelled";
  }
  return "unknown";
}

struct BulkheadRejection {
  BulkheadRejectReason reason;
};

// What a bulkhead tells its observer when it refuses a call.
struct BulkheadRejectionEvent {
  const void* bulkhead;   // its identity (address)
  std::string_view name;  // BulkheadConfig::name; valid during the call only
  BulkheadRejectReason reason;
};

// Told each time a bulkhead refuses a call, on the refusing thread: a function pointer
// and two pointers it is given back (as FallbackObserver, nothing is allocated). A
// registry sets one on the per-key bulkheads it builds, so their rejections reach its
// event listeners (registry.h); `BulkheadObserver(target)` calls
// `target.on_bulkhead_rejection(event)`. The targets must outlive the bulkhead's use.
class BulkheadObserver {
 public:
  using Fn = void (*)(void* target, void* context, const BulkheadRejectionEvent&) noexcept;
  constexpr BulkheadObserver() noexcept = default;
  constexpr BulkheadObserver(Fn fn, void* target, void* context = nullptr) noexcept
      : fn_(fn), target_(target), context_(context) {}
  template <class T>
  requires requires(T& t, const BulkheadRejectionEvent& e) { t.on_bulkhead_rejection(e); }
  explicit BulkheadObserver(T& target) noexcept
      : fn_([](void* t, void*, const BulkheadRejectionEvent& e) noexcept {
          static_cast<T*>(t)->on_bulkhead_rejection(e);
        }),
        target_(const_cast<void*>(static_cast<const void*>(&target))) {}

  void operator()(const BulkheadRejectionEvent& e) const noexcept {
    if (fn_ != nullptr) fn_(target_, context_, e);
  }
  explicit operator bool() const noexcept { return fn_ != nullptr; }

 private:
  Fn fn_ = nullptr;
  void* target_ = nullptr;
  void* context_ = nullptr;
};

// Each field is read atomically, not all at once.
struct BulkheadSnapshot {
  std::uint32_t in_use;          // slots held now
  std::uint32_t max_concurrent;  // the limit
  std::uint32_t waiting;         // threads waiting in acquire()
  std::uint64_t rejected;        // total rejections since construction
};

namespace detail {

// The slot count both bulkheads keep (this one and bulwark::asio's): one atomic step
// that increments `in_use` only below `max`, so the count never overshoots. seq_cst: it
// pairs with each bulkhead's release, which lowers `in_use` and then looks for waiters.
inline bool take_slot(std::atomic<std::uint32_t>& in_use, std::uint32_t max) noexcept {
  std::uint32_t cur = in_use.load(std::memory_order_seq_cst);
  while (cur < max) {
    if (in_use.compare_exchange_weak(cur, cur + 1, std::memory_order_seq_cst)) return true;
  }
  return false;
}

// A bulkhead's refusal: counted in `rejected`, then told to `observer` (if set).
inline Unexpected<BulkheadRejection> refuse_slot(std::atomic<std::uint64_t>& rejected,
                                                 const BulkheadObserver& observer,
                                                 const void* bulkhead, std::string_view name,
                                                 BulkheadRejectReason reason) noexcept {
  rejected.fetch_add(1, std::memory_order_relaxed);
  if (observer) observer(BulkheadRejectionEvent{bulkhead, name, reason});
  return Unexpected(BulkheadRejection{reason});
}

// One counter of a striped bulkhead: the slots of this stripe still free, alone on its
// cache line.
struct alignas(64) BulkheadStripe {
  std::atomic<std::uint32_t> available{0};
};

// Takes one of a stripe's free slots: decrements only above zero. seq_cst, as
// take_slot().
inline bool take_from_stripe(BulkheadStripe& s) noexcept {
  std::uint32_t cur = s.available.load(std::memory_order_seq_cst);
  while (cur > 0) {
    if (s.available.compare_exchange_weak(cur, cur - 1, std::memory_order_seq_cst)) return true;
  }
  return false;
}

struct BulkheadTestAccess;  // defined by tests that look at the stripes

}  // namespace detail

template <Clock C = SteadyClock>
class BasicBulkhead {
  struct PermitTraits {
    using Owner = BasicBulkhead;
    struct Data {
      std::uint32_t stripe = 0;  // the stripe the slot was taken from (0 unstriped)
    };
    static void abandon(BasicBulkhead& b, const Data& d) noexcept { b.give_back(d.stripe); }
  };

 public:
  using clock_type = C;

  // One slot. Move-only; the slot goes back when the permit is destroyed or
  // release()d, whichever comes first.
  class [[nodiscard]] Permit : public detail::PermitBase<typename BasicBulkhead::PermitTraits> {
   public:
    // Gives the slot back now. Idempotent.
    void release() noexcept { this->abandon(); }

   private:
    friend class BasicBulkhead;
    Permit(BasicBulkhead* b, std::uint32_t stripe) noexcept
        : detail::PermitBase<typename BasicBulkhead::PermitTraits>(b, {stripe}) {}
  };

  // Validates `config` (throws InvalidConfig naming the field). A stateful clock must
  // outlive the bulkhead.
  // With stripes > 1 the stripes are allocated here (one line each), once.
  explicit BasicBulkhead(BulkheadConfig config) requires std::is_empty_v<C>
      : config_(detail::validated(std::move(config))),
        clock_(),
        max_(config_.max_concurrent),
        n_stripes_(config_.stripes),
        stripes_(make_stripes()) {}
  BasicBulkhead(BulkheadConfig config, const C& clock)
      : config_(detail::validated(std::move(config))),
        clock_(clock),
        max_(config_.max_concurrent),
        n_stripes_(config_.stripes),
        stripes_(make_stripes()) {}
  BasicBulkhead(BulkheadConfig, const C&&) = delete;
  BasicBulkhead(const BasicBulkhead&) = delete;
  BasicBulkhead& operator=(const BasicBulkhead&) = delete;
  // Destroying a bulkhead while permits are out is a precondition violation.
  ~BasicBulkhead() = default;

  // Takes a slot if one is free. Never blocks, never allocates. Non-blocking callers
  // (event loops, the simulator) use only this.
  Expected<Permit, BulkheadRejection> try_acquire() noexcept {
    if (const std::uint32_t s = take(); s != kNone) return Permit(this, s);
    return reject(BulkheadRejectReason::full);
  }

  // Takes a slot, waiting for one up to min(max_wait, ctx.remaining()) when full.
  // Returns at once when a slot is free or max_wait is zero, and as soon as ctx is
  // cancelled. A rejected caller holds nothing.
  Expected<Permit, BulkheadRejection> acquire(const BasicContext<C>& ctx) {
    if (const std::uint32_t s = take(); s != kNone) return Permit(this, s);
    if (config_.max_wait <= Nanos::zero()) return reject(BulkheadRejectReason::full);
    if (ctx.stop_requested()) return reject(BulkheadRejectReason::cancelled);
    const Nanos remaining = ctx.remaining();
    const bool deadline_bound = remaining < config_.max_wait;
    const Nanos budget = std::min(config_.max_wait, remaining);
    if (budget <= Nanos::zero()) return reject(BulkheadRejectReason::deadline_exceeded);
    return wait(
        ctx.stop_token(), budget,
        deadline_bound ? BulkheadRejectReason::deadline_exceeded : BulkheadRejectReason::full);
  }
  // acquire() with no deadline and no cancellation: waits up to max_wait.
  Expected<Permit, BulkheadRejection> acquire() { return acquire(BasicContext<C>(clock_.get())); }

  // Slots in use, the limit, threads waiting and rejections so far: relaxed loads, no
  // lock, each field read on its own (not one consistent moment). Striped, in_use sums
  // the stripes (one load each): exact at rest, and never above the limit.
  BulkheadSnapshot snapshot() const noexcept {
    return {in_use(), max_, waiting_.load(std::memory_order_relaxed),
            rejected_.load(std::memory_order_relaxed)};
  }
  // Slots held now (one relaxed load, or one per stripe), and the configuration as
  // given (constant).
  std::uint32_t in_use() const noexcept {
    if (stripes_ == nullptr) return in_use_.load(std::memory_order_relaxed);
    std::uint32_t available = 0;
    for (std::uint32_t i = 0; i < n_stripes_; ++i) {
      available += stripes_[i].available.load(std::memory_order_relaxed);
    }
    return max_ - available;  // each stripe stays within its share: available <= max_
  }
  const BulkheadConfig& config() const noexcept { return config_; }

  // Tells `observer` about every rejection from now on (try_acquire() and acquire()),
  // on the rejecting thread, after the rejection is counted. Set it before the bulkhead
  // is shared: it is read without synchronisation. Costs nothing when a slot is free.
  void observe_rejections(BulkheadObserver observer) noexcept { observer_ = observer; }

 private:
  friend struct detail::BulkheadTestAccess;
  static constexpr std::uint32_t kNone = 0xFFFF'FFFFu;

  std::unique_ptr<detail::BulkheadStripe[]> make_stripes() const {
    if (n_stripes_ <= 1) return nullptr;
    auto s = std::make_unique<detail::BulkheadStripe[]>(n_stripes_);
    for (std::uint32_t i = 0; i < n_stripes_; ++i) {
      s[i].available.store(max_ / n_stripes_ + (i < max_ % n_stripes_ ? 1 : 0),
                           std::memory_order_relaxed);
    }
    return s;
  }

  // The one atomic step: increment only below the limit, so the count can never
  // overshoot. Striped: take from this thread's stripe, else from the others in turn
  // (each a decrement only above zero; every stripe keeps its own share, so the sum in
  // flight never exceeds max_). Returns the stripe taken from (0 unstriped), or kNone.
  // seq_cst pairs with give_back(): a waiter publishes waiting_ and then looks at the
  // count(s); a releaser raises a count and then looks at waiting_. At least one of
  // them sees the other, so no wake-up is lost.
  std::uint32_t take() noexcept {
    if (stripes_ == nullptr) return detail::take_slot(in_use_, max_) ? 0 : kNone;
    std::uint32_t home = detail::thread_slot();
    if (home >= n_stripes_) home %= n_stripes_;
    return detail::take_from_stripe(stripes_[home]) ? home : steal(home);
  }

  // This thread's stripe is empty: the others, in order from the next one.
  std::uint32_t steal(std::uint32_t home) noexcept {
    for (std::uint32_t k = 1; k < n_stripes_; ++k) {
      const std::uint32_t i = home + k < n_stripes_ ? home + k : home + k - n_stripes_;
      if (detail::take_from_stripe(stripes_[i])) return i;
    }
    return kNone;
  }

  void give_back(std::uint32_t stripe) noexcept {
    if (stripes_ == nullptr) {
      in_use_.fetch_sub(1, std::memory_order_seq_cst);
    } else {
      stripes_[stripe].available.fetch_add(1, std::memory_order_seq_cst);
    }
    BULWARK_SCHEDULE_POINT("bulkhead.give_back: slot back, waiters not read yet");
    // Striped, this load is the only access to a line other threads use: it is not
    // written while nobody waits, so it stays in every core's cache.
    if (waiting_.load(std::memory_order_seq_cst) != 0) {
      // Taking the mutex orders the notify after a waiter's last check. notify_all: a
      // notified waiter that times out at the same moment must not swallow the wake-up
      // another waiter needed.
      std::lock_guard lock(mu_);
      cv_.notify_all();
    }
  }

  Unexpected<BulkheadRejection> reject(BulkheadRejectReason reason) noexcept {
    return detail::refuse_slot(rejected_, observer_, this, config_.name, reason);
  }

  Expected<Permit, BulkheadRejection> wait(const std::stop_token& stop, Nanos budget,
                                           BulkheadRejectReason on_timeout) {
    using SteadyTime = std::chrono::steady_clock::time_point;
    const SteadyTime now = std::chrono::steady_clock::now();
    const SteadyTime until = budget >= SteadyTime::max() - now ? SteadyTime::max() : now + budget;
    // Declared before the lock: its destructor may wait for a running callback, which
    // needs the mutex, so the lock must be gone by then.
    std::stop_callback wake(stop, [this] {
      std::lock_guard lock(mu_);
      cv_.notify_all();
    });
    BulkheadRejectReason refused = on_timeout;
    {
      std::unique_lock lock(mu_);
      waiting_.fetch_add(1, std::memory_order_seq_cst);
      struct Leave {
        std::atomic<std::uint32_t>& w;
        ~Leave() { w.fetch_sub(1, std::memory_order_seq_cst); }
      } leave{waiting_};
      for (;;) {
        if (const std::uint32_t s = take(); s != kNone) return Permit(this, s);
        if (stop.stop_requested()) {
          refused = BulkheadRejectReason::cancelled;
          break;
        }
        BULWARK_SCHEDULE_POINT("bulkhead.wait: counted, no slot, going to sleep");
        if (cv_.wait_until(lock, until) == std::cv_status::timeout) {
          if (const std::uint32_t s = take(); s != kNone) return Permit(this, s);
          break;
        }
      }
    }
    // Rejected with the mutex released: an observer may call back into the bulkhead.
    return reject(refused);
  }

  const BulkheadConfig config_;
  [[no_unique_address]] const detail::ClockRef<C> clock_;
  const std::uint32_t max_;
  const std::uint32_t n_stripes_;
  // Null unless stripes > 1; then in_use_ is unused and each stripe counts its free slots.
  const std::unique_ptr<detail::BulkheadStripe[]> stripes_;
  BulkheadObserver observer_{};
  alignas(64) std::atomic<std::uint32_t> in_use_{0};
  std::atomic<std::uint32_t> waiting_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

using Bulkhead = BasicBulkhead<SteadyClock>;

}  // namespace bulwark

#endif  // BULWARK_BULKHEAD_H_
