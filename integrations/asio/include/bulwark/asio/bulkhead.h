// bulwark/asio/bulkhead.h — a cap on concurrent calls, whose waiters queue without a thread.
//
// The synchronous bulkhead (bulwark/bulkhead.h) blocks a thread on a condition variable
// while it waits for a slot: in an event loop that stalls every connection the thread
// serves. An AsyncBulkhead lets at most `max_concurrent` calls in, and queues up to
// `max_queue` more as suspended operations — FIFO, no thread held — each resumed on
// its own executor when a slot frees, and never past its deadline (the context's, or
// `max_wait`, whichever is first). A waiter whose operation is cancelled (Asio's
// per-operation cancellation: a parent coroutine cancelled, a connection closed)
// leaves the queue at once and takes no slot with it; a slot granted to it in the
// same instant is handed back.
//
//   bulwark::asio::AsyncBulkhead pool({.name = "reviews", .max_concurrent = 80,
//                                      .max_queue = 1000, .max_wait = 500ms});
//
//   auto slot = co_await pool.acquire(ctx, asio::use_awaitable);
//   if (!slot) co_return respond_503();        // full queue, deadline, max_wait, cancelled
//   co_await call_reviews();                    // the slot goes back when `slot` dies
//
// Cost. The free-slot path (try_acquire(), and acquire() when a slot is free and
// nobody queues) is lock-free: one load of the queue length and a CAS, no allocation.
// Giving a slot back is one atomic subtract and one load, plus — only while waiters
// queue — the queue's mutex, held to pop the head and arm nothing. Queueing is the
// slow path: the mutex (held briefly, to link the waiter and arm its timer), one
// allocation for the waiter (its handler, a timer), a lookup of the waiter registry of
// the executor's context (an Asio service) and its mutex, taken to register the waiter
// and again to post its completion.
//
// Threading. Slots are taken and given back from any thread. A waiter's own events —
// its timer, its cancellation — happen on its executor (on a multi-threaded
// io_context, a strand: Asio requires cancellation to be emitted where the operation
// runs); the grant comes from whichever thread gave a slot back and is posted to
// the waiter's executor.
//
// Lifetimes. The bulkhead must outlive its permits and its queued waiters (destroying
// it with either is a precondition violation, asserted in debug builds). It may outlive
// the io_contexts of its waiters and be shared by several: an io_context may be
// destroyed with waiters queued — they leave the queue without completing, their
// handlers (a coroutine's frame) destroyed unrun, as Asio does for any operation still
// pending there — and a slot given back afterwards goes to the next waiter on another
// context, or stays free. That happens in the context's shutdown, through a service the
// bulkhead registers in each context where a waiter queues; a grant racing it from
// another thread is destroyed by that thread, and the shutdown waits for it.
//
// Rejections reach an observer (observe_rejections(), the core's BulkheadObserver),
// and snapshot() returns the core's BulkheadSnapshot, so metrics and the Prometheus
// exposition read an AsyncBulkhead as they read a Bulkhead (metrics.h add_bulkhead).

#ifndef BULWARK_ASIO_BULKHEAD_H_
#define BULWARK_ASIO_BULKHEAD_H_

#include <algorithm>
#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/error.hpp>
#include <asio/execution/context.hpp>
#include <asio/execution_context.hpp>
#include <asio/post.hpp>
#include <asio/query.hpp>
#include <atomic>
#include <cassert>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "bulwark/asio/timer.h"
#include "bulwark/bulkhead.h"
#include "bulwark/clock.h"
#include "bulwark/config_error.h"
#include "bulwark/context.h"
#include "bulwark/detail/permit_base.h"
#include "bulwark/detail/schedule_point.h"
#include "bulwark/expected.h"

namespace bulwark::asio {

struct AsyncBulkheadConfig {
  // Identifies the bulkhead in errors and metrics.
  std::string name = "default";
  // Calls allowed in flight at once. >= 1.
  std::uint32_t max_concurrent = 25;
  // Waiters allowed in the queue at once; a caller finding the queue full is rejected
  // (full). 0 rejects at once when no slot is free.
  std::uint32_t max_queue = 100;
  // How long a waiter may wait; its context's deadline may end the wait sooner.
  // Positive when max_queue > 0.
  Nanos max_wait = std::chrono::seconds(1);
};

// Checks every field; the error names the first one that is wrong.
Expected<void, ConfigError> validate(const AsyncBulkheadConfig& config);

namespace detail {

// A queued acquire() as the registry of its executor's execution context sees it: a
// reference count, and a link in that registry (under the registry's mutex).
class RegisteredWaiter {
 public:
  RegisteredWaiter() = default;
  RegisteredWaiter(const RegisteredWaiter&) = delete;
  RegisteredWaiter& operator=(const RegisteredWaiter&) = delete;

  void add_ref() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void unref() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // Takes the waiter out of its bulkhead's queue (and cancels its timer) if it still is
  // in it; true if this call did.
  virtual bool leave_queue() noexcept = 0;
  // For a waiter that leave_queue() took out: destroys its handler unrun, leaves the
  // registry and drops the reference of its completion.
  virtual void abandon() noexcept = 0;

 protected:
  virtual ~RegisteredWaiter() = default;

 private:
  friend class WaiterRegistry;
  std::atomic<int> refs_{2};              // the completion's and the timer handler's
  RegisteredWaiter* reg_prev_ = nullptr;  // under the registry's mutex
  RegisteredWaiter* reg_next_ = nullptr;
};

// The queued waiters of every bulkhead whose executor belongs to one execution context
// (an io_context): an Asio service of that context. When the context shuts down (in its
// destructor), the waiters it holds leave their queues and their handlers are destroyed
// unrun, as Asio destroys every operation still pending there; from then on a
// completion for that context is destroyed instead of posted. Internal to bulwark.
class WaiterRegistry final : public ::asio::execution_context::service {
 public:
  static inline ::asio::execution_context::id id;

  explicit WaiterRegistry(::asio::execution_context& ctx) : service(ctx) {}

  // Adds `w` (under its bulkhead's mutex, as it is queued); false if the context has
  // shut down.
  bool add(RegisteredWaiter* w) noexcept {
    std::lock_guard lock(mu_);
    if (shut_) return false;
    w->reg_prev_ = nullptr;
    w->reg_next_ = head_;
    if (head_ != nullptr) head_->reg_prev_ = w;
    head_ = w;
    return true;
  }

  // The completion of `w`: while the context runs, calls post() under the lock (the
  // context cannot shut down between the check and the post), removes `w` and returns
  // true. Once it has shut down, returns false: the caller destroys the handler and the
  // result, then calls finished(w).
  template <class Post>
  bool post_unless_shut(RegisteredWaiter* w, Post&& post) {
    std::lock_guard lock(mu_);
    if (shut_) return false;
    remove(w);  // first: once posted, `w` may run and be freed on another thread
    std::forward<Post>(post)();
    return true;
  }

  // `w`'s handler is gone: it leaves the registry.
  void finished(RegisteredWaiter* w) noexcept {
    std::lock_guard lock(mu_);
    remove(w);
    if (head_ == nullptr) idle_.notify_all();
  }

 private:
  void remove(RegisteredWaiter* w) noexcept {  // under mu_
    (w->reg_prev_ != nullptr ? w->reg_prev_->reg_next_ : head_) = w->reg_next_;
    if (w->reg_next_ != nullptr) w->reg_next_->reg_prev_ = w->reg_prev_;
    w->reg_prev_ = w->reg_next_ = nullptr;
  }

  // Every waiter still queued leaves its queue; its handler is destroyed unrun. A waiter
  // that another thread has just granted or rejected is destroyed by that thread (its
  // completion sees the shutdown): this waits for it, so that nothing of the context is
  // touched once this returns.
  void shutdown() override {
    std::vector<RegisteredWaiter*> mine;
    {
      std::lock_guard lock(mu_);
      shut_ = true;
      for (RegisteredWaiter* w = head_; w != nullptr; w = w->reg_next_) {
        w->add_ref();  // registered: its completion's reference is still held
        mine.push_back(w);
      }
    }
    for (RegisteredWaiter* w : mine) {
      if (w->leave_queue()) w->abandon();
      w->unref();
    }
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return head_ == nullptr; });
  }

  std::mutex mu_;
  std::condition_variable idle_;
  RegisteredWaiter* head_ = nullptr;  // under mu_
  bool shut_ = false;                 // under mu_
};

// The execution context of an executor.
template <class Executor>
::asio::execution_context& context_of(const Executor& ex) noexcept {
  if constexpr (::asio::can_query<const Executor&, ::asio::execution::context_t>::value) {
    return ::asio::query(ex, ::asio::execution::context);
  } else {
    return ex.context();
  }
}

}  // namespace detail

template <Clock C = SteadyClock>
class BasicAsyncBulkhead {
  struct PermitTraits {
    using Owner = BasicAsyncBulkhead;
    struct Data {};
    static void abandon(BasicAsyncBulkhead& b, const Data&) noexcept { b.give_back(); }
  };

 public:
  using clock_type = C;

  // One slot. Move-only; the slot goes back when the permit is destroyed or
  // release()d, whichever comes first.
  class [[nodiscard]] Permit
      : public bulwark::detail::PermitBase<typename BasicAsyncBulkhead::PermitTraits> {
   public:
    // Gives the slot back now (to the head of the queue, if anyone waits). Idempotent.
    void release() noexcept { this->abandon(); }

   private:
    friend class BasicAsyncBulkhead;
    explicit Permit(BasicAsyncBulkhead* b) noexcept
        : bulwark::detail::PermitBase<typename BasicAsyncBulkhead::PermitTraits>(b, {}) {}
  };

  using Result = Expected<Permit, BulkheadRejection>;

  // Validates `config` (throws InvalidConfig naming the field). A stateful clock must
  // outlive the bulkhead, and a ManualClock must be the one bound to ManualTimerClock
  // while anyone waits (timer.h).
  explicit BasicAsyncBulkhead(AsyncBulkheadConfig config) requires std::is_empty_v<C>
      : config_(bulwark::detail::validated(std::move(config))),
        clock_(),
        max_(config_.max_concurrent) {}
  BasicAsyncBulkhead(AsyncBulkheadConfig config, const C& clock)
      : config_(bulwark::detail::validated(std::move(config))),
        clock_(clock),
        max_(config_.max_concurrent) {}
  BasicAsyncBulkhead(AsyncBulkheadConfig, const C&&) = delete;
  BasicAsyncBulkhead(const BasicAsyncBulkhead&) = delete;
  BasicAsyncBulkhead& operator=(const BasicAsyncBulkhead&) = delete;
  // Destroying a bulkhead while permits are out or waiters queue is a precondition
  // violation (asserted in debug builds).
  ~BasicAsyncBulkhead() {
    assert(in_use_.load() == 0 && "an AsyncBulkhead destroyed with permits out");
    assert(queued_.load() == 0 && "an AsyncBulkhead destroyed with waiters queued");
  }

  // Takes a slot if one is free and nobody queues for one. Lock-free, no allocation.
  Result try_acquire() noexcept {
    if (queued_.load(std::memory_order_seq_cst) == 0 && take()) return Permit(this);
    return reject(BulkheadRejectReason::full);
  }

  // try_acquire() for a caller that queues with acquire() when it fails: a refusal here
  // is not counted as a rejection. Lock-free, no allocation.
  std::optional<Permit> take_if_free() noexcept {
    if (queued_.load(std::memory_order_seq_cst) == 0 && take()) return Permit(this);
    return std::nullopt;
  }

  // Takes a slot, queueing for one if none is free: completes with a Permit, or with
  // the rejection — full (the queue is full, or max_wait ran out), deadline_exceeded
  // (the context's deadline came first) or cancelled (the operation was cancelled, or
  // the context's stop_token was already stopped). Completes on the handler's
  // executor (the handler's associated executor, which use_awaitable always has; bind
  // one to a plain callback with asio::bind_executor), never inside this call.
  // Signature: void(Expected<Permit, BulkheadRejection>).
  template <class CompletionToken>
  auto acquire(const BasicContext<C>& ctx, CompletionToken&& token) {
    return ::asio::async_initiate<CompletionToken, void(Result)>(
        [this](auto handler, Deadline deadline, bool stopped) {
          start(std::move(handler), deadline, stopped);
        },
        token, ctx.deadline(), ctx.stop_requested());
  }

  // Slots in use, the limit, waiters queued (as BulkheadSnapshot::waiting) and
  // rejections so far: relaxed loads, no lock, each field read on its own.
  BulkheadSnapshot snapshot() const noexcept {
    return {in_use_.load(std::memory_order_relaxed), max_, queued_.load(std::memory_order_relaxed),
            rejected_.load(std::memory_order_relaxed)};
  }
  // Slots held now. One relaxed load.
  std::uint32_t in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
  // Waiters in the queue now.
  std::uint32_t queued() const noexcept { return queued_.load(std::memory_order_relaxed); }
  const AsyncBulkheadConfig& config() const noexcept { return config_; }
  const std::string& name() const noexcept { return config_.name; }

  // Tells `observer` about every rejection from now on, on the rejecting thread. Set it
  // before the bulkhead is shared.
  void observe_rejections(BulkheadObserver observer) noexcept { observer_ = observer; }

 private:
  // A queued acquire(). Linked in the queue under mu_, and in the registry of its
  // executor's context from then until its completion is posted or its handler
  // destroyed; alive while the pending completion or the timer's handler holds a
  // reference.
  struct Waiter : detail::RegisteredWaiter {
    Waiter* prev = nullptr;
    Waiter* next = nullptr;
    bool queued = false;  // under mu_
    BulkheadRejectReason on_timeout = BulkheadRejectReason::full;
    BasicAsyncBulkhead* owner = nullptr;
    detail::WaiterRegistry* registry = nullptr;
    bool registered = false;              // set under mu_ as it is linked
    virtual void complete(Result r) = 0;  // posts the handler; called exactly once
    virtual void cancel_timer() = 0;      // under mu_
    bool leave_queue() noexcept override { return owner->leave(this); }
  };
  // One reference, dropped when the handler holding it runs or is destroyed unrun (an
  // io_context destroyed with the completion still queued).
  class Ref {
   public:
    explicit Ref(Waiter* w) noexcept : w_(w) {}
    Ref(Ref&& o) noexcept : w_(std::exchange(o.w_, nullptr)) {}
    Ref& operator=(Ref&&) = delete;
    ~Ref() { reset(); }
    void reset() noexcept {
      if (w_ != nullptr) std::exchange(w_, nullptr)->unref();
    }
    Waiter* get() const noexcept { return w_; }

   private:
    Waiter* w_;
  };

  template <class Handler>
  struct WaiterFor final : Waiter {
    using Executor = ::asio::associated_executor_t<Handler, ::asio::any_io_executor>;
    WaiterFor(BasicAsyncBulkhead* b, Handler&& h)
        : handler(std::move(h)),
          executor(std::in_place,
                   ::asio::get_associated_executor(*handler, ::asio::any_io_executor())),
          timer(std::in_place, *executor) {
      this->owner = b;
      // After the timer: the timer's services exist first, so the registry shuts down
      // before them (Asio shuts services down newest first).
      this->registry = &::asio::use_service<detail::WaiterRegistry>(detail::context_of(*executor));
    }
    ~WaiterFor() override { drop_handler(); }

    void complete(Result r) override {
      auto post = [&] {
        ::asio::post(*executor, [ref = Ref(this), r = std::move(r)]() mutable {
          // On the waiter's executor, where its cancellation is emitted.
          auto* self = static_cast<WaiterFor*>(ref.get());
          auto slot = ::asio::get_associated_cancellation_slot(*self->handler);
          if (slot.is_connected()) slot.clear();
          Handler h = std::move(*self->handler);
          self->handler.reset();
          ref.reset();
          std::move(h)(std::move(r));
        });
      };
      if (!this->registered) return post();
      if (this->registry->post_unless_shut(this, post)) return;
      // Its io_context has shut down: the handler and the result (a permit goes back)
      // are destroyed here, unrun.
      { [[maybe_unused]] Result dropped = std::move(r); }
      abandon();
    }
    void abandon() noexcept override {
      drop_handler();
      timer.reset();  // its pending wait (cancelled when it left the queue) holds a reference
      executor.reset();
      this->registry->finished(this);
      this->unref();  // the completion's reference
    }
    void cancel_timer() override { timer->cancel(); }

    // Destroys the handler unrun (if it still is here), its cancellation handler first.
    void drop_handler() noexcept {
      if (!handler) return;
      auto slot = ::asio::get_associated_cancellation_slot(*handler);
      if (slot.is_connected()) slot.clear();
      handler.reset();
    }

    std::optional<Handler> handler;
    // Both go, with the handler, before the registry hears the waiter is finished: the
    // last reference may be dropped later on another thread, after the context is gone.
    std::optional<Executor> executor;
    std::optional<Timer<C>> timer;
  };

  bool take() noexcept { return bulwark::detail::take_slot(in_use_, max_); }

  // seq_cst pairs with start(): a waiter publishes queued_ and then tries take(); a
  // releaser lowers in_use_ and then reads queued_. One of them sees the other.
  void give_back() noexcept {
    in_use_.fetch_sub(1, std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_seq_cst) != 0) drain();
  }

  // Hands free slots to the head of the queue, in order. Completions are posted with
  // the mutex released.
  void drain() noexcept {
    Waiter* granted = nullptr;  // a list through `next`, in queue order
    Waiter** tail = &granted;
    {
      std::lock_guard lock(mu_);
      while (head_ != nullptr && take()) {
        Waiter* w = head_;
        unlink(w);
        w->cancel_timer();
        *tail = w;
        tail = &w->next;
      }
    }
    while (granted != nullptr) {
      Waiter* w = std::exchange(granted, granted->next);
      w->complete(Permit(this));
    }
  }

  void link(Waiter* w) noexcept {  // under mu_
    w->queued = true;
    w->prev = tail_;
    w->next = nullptr;
    (tail_ != nullptr ? tail_->next : head_) = w;
    tail_ = w;
    queued_.fetch_add(1, std::memory_order_seq_cst);
  }
  void unlink(Waiter* w) noexcept {  // under mu_
    w->queued = false;
    (w->prev != nullptr ? w->prev->next : head_) = w->next;
    (w->next != nullptr ? w->next->prev : tail_) = w->prev;
    w->prev = w->next = nullptr;
    queued_.fetch_sub(1, std::memory_order_seq_cst);
  }

  // Takes `w` out of the queue if it still is in it; true if this caller did.
  bool leave(Waiter* w) noexcept {
    std::lock_guard lock(mu_);
    if (!w->queued) return false;
    unlink(w);
    w->cancel_timer();
    return true;
  }

  template <class Handler>
  void start(Handler handler, Deadline deadline, bool stopped) {
    auto fail_now = [&](BulkheadRejectReason reason) {
      auto ex = ::asio::get_associated_executor(handler);
      ::asio::post(ex, [h = std::move(handler), r = Result(reject(reason))]() mutable {
        std::move(h)(std::move(r));
      });
    };
    if (stopped) return fail_now(BulkheadRejectReason::cancelled);
    auto* w = new WaiterFor<Handler>(this, std::move(handler));
    const Ticks now = now_ticks(clock_.get());
    const Deadline limit = Deadline::at(saturating_add(now, to_ticks(config_.max_wait)));
    w->on_timeout =
        deadline < limit ? BulkheadRejectReason::deadline_exceeded : BulkheadRejectReason::full;
    const Deadline until = earliest(deadline, limit);
    bool granted = false;
    bool shut = false;
    {
      std::lock_guard lock(mu_);
      const bool first = head_ == nullptr;
      if (first && take()) {
        granted = true;
      } else if (queued_.load(std::memory_order_relaxed) >= config_.max_queue) {
        // falls through to the rejection below
      } else if (until.passed(now)) {
        // likewise
      } else if (!w->registry->add(w)) {
        shut = true;  // its io_context is being destroyed
      } else {
        w->registered = true;
        if (first) BULWARK_SCHEDULE_POINT("async_bulkhead.start: no slot, not queued yet");
        link(w);
        // A slot given back between the failed take() and link() went back while
        // queued_ was still 0, so its releaser did not drain: this second take() finds
        // it, and the waiter (alone in the queue) has it at once. A releaser after
        // link() sees queued_ != 0 and drains once the mutex is free; when others queue
        // ahead, their releasers drain (seq_cst: a waiter publishes queued_ and then
        // tries take(); a releaser lowers in_use_ and then reads queued_).
        if (first && take()) {
          unlink(w);
          granted = true;
        } else {
          expire_at<C>(*w->timer, until);
          w->timer->async_wait([this, ref = Ref(w)](const std::error_code& ec) {
            Waiter* self = ref.get();
            if (!ec && leave(self)) self->complete(reject(self->on_timeout));
          });
          auto slot = ::asio::get_associated_cancellation_slot(*w->handler);
          if (slot.is_connected()) {
            slot.assign([this, w](::asio::cancellation_type type) {
              if (type == ::asio::cancellation_type::none) return;
              if (leave(w)) w->complete(reject(BulkheadRejectReason::cancelled));
            });
          }
          return;
        }
      }
    }
    // Not queued: the timer never ran, so its reference goes now.
    w->unref();
    if (shut) {
      w->drop_handler();  // as Asio does with a handler for a context that shut down
      w->unref();
    } else if (granted) {
      w->complete(Permit(this));
    } else if (until.passed(now)) {
      w->complete(reject(BulkheadRejectReason::deadline_exceeded));
    } else {
      w->complete(reject(BulkheadRejectReason::full));
    }
  }

  Unexpected<BulkheadRejection> reject(BulkheadRejectReason reason) noexcept {
    return bulwark::detail::refuse_slot(rejected_, observer_, this, config_.name, reason);
  }

  const AsyncBulkheadConfig config_;
  [[no_unique_address]] const bulwark::detail::ClockRef<C> clock_;
  const std::uint32_t max_;
  BulkheadObserver observer_{};
  alignas(64) std::atomic<std::uint32_t> in_use_{0};
  std::atomic<std::uint32_t> queued_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::mutex mu_;
  Waiter* head_ = nullptr;  // under mu_
  Waiter* tail_ = nullptr;  // under mu_
};

using AsyncBulkhead = BasicAsyncBulkhead<SteadyClock>;

}  // namespace bulwark::asio

#endif  // BULWARK_ASIO_BULKHEAD_H_
