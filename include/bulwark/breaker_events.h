// bulwark/breaker_events.h — states, transitions and the listeners that hear them.
//
// A listener is called once per state change, on the thread that made the change,
// after the change is visible and while no lock is held:
//
//   policy.on_transition([](const bulwark::TransitionEvent& e) {
//     log("breaker {} {} -> {} ({})", e.name, to_string(e.from), to_string(e.to),
//         to_string(e.reason));
//   });
//
// Ordering: the events of one breaker are delivered one at a time and in order. While
// a listener runs, further transitions of that breaker are recorded and applied (and
// announced) by the same thread as soon as the listener returns, so keep listeners
// short: a listener that blocks delays the breaker's next transition by as long.
// A listener may call back into the breaker (even to force a transition), and one
// that throws is ignored: neither can break the breaker.
//
// Rejections can be heard too (`policy.on_rejection(...)`), for logs. A rejection
// listener runs on the rejected caller's thread, on every rejection — during an outage
// that is every request — so it must be cheap. With none registered, a rejection pays
// one relaxed load for the feature.

#ifndef BULWARK_BREAKER_EVENTS_H_
#define BULWARK_BREAKER_EVENTS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "bulwark/clock.h"

namespace bulwark {

enum class State : std::uint8_t {
  closed = 0,        // calls pass; outcomes are counted
  open = 1,          // calls are rejected until the open period ends
  half_open = 2,     // a few probes test the dependency
  forced_open = 3,   // manual: rejects everything until told otherwise
  disabled = 4,      // manual: admits everything, records nothing
  metrics_only = 5,  // manual: records outcomes, never rejects
};

constexpr std::string_view to_string(State s) noexcept {
  switch (s) {
    case State::closed:
      return "closed";
    case State::open:
      return "open";
    case State::half_open:
      return "half_open";
    case State::forced_open:
      return "forced_open";
    case State::disabled:
      return "disabled";
    case State::metrics_only:
      return "metrics_only";
  }
  return "unknown";
}

// Why try_acquire() said no.
enum class RejectReason : std::uint8_t {
  open,                 // the breaker is OPEN and its open period has not elapsed
  half_open_full,       // HALF_OPEN, and every probe slot is taken
  forced_open,          // an operator forced the breaker open
  half_open_throttled,  // HALF_OPEN lets a fraction of requests through; not this one
};

constexpr std::string_view to_string(RejectReason r) noexcept {
  switch (r) {
    case RejectReason::open:
      return "open";
    case RejectReason::half_open_full:
      return "half_open_full";
    case RejectReason::forced_open:
      return "forced_open";
    case RejectReason::half_open_throttled:
      return "half_open_throttled";
  }
  return "unknown";
}

// Why a transition happened.
enum class TransitionReason : std::uint8_t {
  consecutive_failures,  // CLOSED -> OPEN: the consecutive-failure rule fired
  failure_rate,          // CLOSED -> OPEN: the failure rate reached its threshold
  slow_call_rate,        // CLOSED -> OPEN: the slow-call rate reached its threshold
  open_period_elapsed,   // OPEN -> HALF_OPEN: the first request after the period
  probes_succeeded,      // HALF_OPEN -> CLOSED
  probe_failed,          // HALF_OPEN -> OPEN
  manual,                // transition_to() or reset()
  fleet_opened,          // -> OPEN: adopted from elsewhere (adopt_open), e.g. a shared store
  fleet_closed,          // OPEN / HALF_OPEN -> CLOSED: adopted from elsewhere (adopt_close)
};

constexpr std::string_view to_string(TransitionReason r) noexcept {
  switch (r) {
    case TransitionReason::consecutive_failures:
      return "consecutive_failures";
    case TransitionReason::failure_rate:
      return "failure_rate";
    case TransitionReason::slow_call_rate:
      return "slow_call_rate";
    case TransitionReason::open_period_elapsed:
      return "open_period_elapsed";
    case TransitionReason::probes_succeeded:
      return "probes_succeeded";
    case TransitionReason::probe_failed:
      return "probe_failed";
    case TransitionReason::manual:
      return "manual";
    case TransitionReason::fleet_opened:
      return "fleet_opened";
    case TransitionReason::fleet_closed:
      return "fleet_closed";
  }
  return "unknown";
}

struct TransitionEvent {
  std::string_view name;  // the breaker's configured name
  const void* breaker;    // identity of the breaker that changed (for registries)
  State from;
  State to;
  TransitionReason reason;
  // Clock time of the transition. For reason fleet_opened: when the adopted open period
  // began as this clock sees it, so that at + open_duration is when it ends.
  Ticks at;
  // The breaker's generation after the transition: +1 per transition, including the
  // silent ones (a reset while CLOSED, a fresh half-open round); wraps at 2^19.
  std::uint32_t generation;
  // An automatic opening that came within flapping_period of the breaker's last
  // recovery. Such an opening continues the open-period growth the breaker had reached
  // instead of starting again at open_duration.
  bool flapping = false;
  // Into OPEN: how long this open period lasts. Otherwise zero.
  Nanos open_duration = Nanos::zero();
};

using TransitionListener = std::function<void(const TransitionEvent&)>;

// Also heard through BreakerPolicy::on_rejection.
struct RejectionEvent {
  std::string_view name;  // the breaker's configured name
  const void* breaker;    // identity of the breaker that said no
  RejectReason reason;
  Nanos retry_after;
  Ticks at;  // clock time of the rejection
};

using RejectionListener = std::function<void(const RejectionEvent&)>;

// A handle to remove a listener again.
using ListenerId = std::uint64_t;

namespace detail {

// Which listener lists this thread is emitting right now, and into which reader slot:
// a list's remove() called from inside one of its own listeners must neither wait for
// its own thread nor free the list that thread is walking.
struct EmitFrame {
  const void* list;
  unsigned slot;
};
struct EmitStack {
  static constexpr int kDepth = 32;
  EmitFrame frames[kDepth];
  int depth = 0;  // may exceed kDepth: those frames are not recorded
};
inline thread_local EmitStack emit_stack;

// Copy-on-write list of listeners. Adding and removing take a mutex (only against each
// other, never on a call's path). Emitting is lock-free: with none registered it is one
// relaxed load (callers check empty() first); otherwise two atomic adds to enter one of
// two reader slots, one load of the list, the listeners run with nothing held, and one
// atomic subtract to leave.
//
// Reclamation is a two-slot epoch scheme (as in userspace RCU): an emitter reads the
// phase, enters the phase's slot, and re-reads the phase; if it moved, it leaves and
// tries again. A writer swaps in the new list, then flips the phase twice, each time
// waiting for the slot the phase left to empty: after that no emitter can still hold
// the old list, which is freed. So remove() returns only once every emitter that might
// still be running the removed listener on another thread has left it — the caller may
// destroy whatever the listener captured. No pointer bits are borrowed, so tagged or
// top-byte-using pointers (MTE, HWASan, LAM) are fine.
//
// Called from inside a listener of the same list (a listener removing itself, say),
// remove() cannot wait for its own thread, and does not wait for the others either
// (two such calls on two threads would wait for each other): the old list is kept
// until a later remove() from outside any listener, or the list's destruction. add()
// never waits unless a few old lists have piled up.
//
// Ids start at `first` and step by `step`, so lists sharing one id space
// (transitions, rejections) never collide. Each listener may name the kinds of event
// it wants as bits (`kinds`; all by default) and emit() says which kind it sends:
// the event hub (observe.h) filters by event kind this way, and kinds() tells an
// emitter in one load whether anyone listens for a kind at all.
template <class Event>
class ListenerList {
 public:
  using Listener = std::function<void(const Event&)>;

  explicit ListenerList(ListenerId first = 1, ListenerId step = 1)
      : head_(new Node{}), next_id_(first), step_(step) {}
  ListenerList(const ListenerList&) = delete;
  ListenerList& operator=(const ListenerList&) = delete;
  ~ListenerList() {
    delete head_.load(std::memory_order_acquire);
    for (const Node* n : retired_) delete n;
  }

  ListenerId add(Listener listener, std::uint32_t kinds = kAllKinds) {
    std::lock_guard lock(mu_);
    auto next = std::make_unique<Node>(*head_.load(std::memory_order_acquire));
    const ListenerId id = next_id_;
    next_id_ += step_;
    next->entries.push_back(Entry{id, kinds, std::move(listener)});
    replace(std::move(next), retired_.size() >= kMaxRetired);
    return id;
  }

  // Removes a listener; returns false if it was not there. Once it returns, the
  // listener is not running on any other thread and will not run again (unless
  // called from inside a listener of this list: see above).
  bool remove(ListenerId id) {
    std::lock_guard lock(mu_);
    auto next = std::make_unique<Node>(*head_.load(std::memory_order_acquire));
    auto& e = next->entries;
    const auto it = std::find_if(e.begin(), e.end(), [id](const Entry& x) { return x.id == id; });
    if (it == e.end()) return false;
    e.erase(it);
    replace(std::move(next), true);
    return true;
  }

  // Calls, in the order they were added, the listeners that want `kind`.
  void emit(const Event& event, std::uint32_t kind = kAllKinds) const noexcept {
    unsigned slot = 0;
    for (;;) {
      const std::uint32_t p = phase_.load(std::memory_order_seq_cst);
      slot = p & 1;
      readers_[slot].fetch_add(1, std::memory_order_seq_cst);
      if (phase_.load(std::memory_order_seq_cst) == p) break;
      readers_[slot].fetch_sub(1, std::memory_order_release);  // a writer flipped: try again
    }
    const Node* n = head_.load(std::memory_order_seq_cst);
    EmitStack& stack = emit_stack;
    if (stack.depth < EmitStack::kDepth) stack.frames[stack.depth] = EmitFrame{this, slot};
    ++stack.depth;
    for (const Entry& entry : n->entries) {
      if ((entry.kinds & kind) == 0) continue;
#if defined(__cpp_exceptions)
      try {
        entry.fn(event);
      } catch (...) {
        // A listener's failure is its own: what it reports has already happened.
      }
#else
      entry.fn(event);
#endif
    }
    --stack.depth;
    readers_[slot].fetch_sub(1, std::memory_order_release);
  }

  bool empty() const noexcept { return size() == 0; }
  std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }
  // The union of the kinds the listeners want: one relaxed load.
  std::uint32_t kinds() const noexcept { return kinds_.load(std::memory_order_relaxed); }

  static constexpr std::uint32_t kAllKinds = ~std::uint32_t{0};

 private:
  struct Entry {
    ListenerId id;
    std::uint32_t kinds;
    Listener fn;
  };
  struct Node {
    std::vector<Entry> entries;
  };
  static constexpr std::size_t kMaxRetired = 8;

  // True if this thread is inside emit() of this list (at any depth).
  bool emitting_here() const noexcept {
    const EmitStack& stack = emit_stack;
    if (stack.depth > EmitStack::kDepth) return true;  // too deep to know: assume so
    for (int i = 0; i < stack.depth; ++i) {
      if (stack.frames[i].list == this) return true;
    }
    return false;
  }

  // Waits until every emitter that entered before now has left. Under mu_.
  void synchronize() noexcept {
    for (int flip = 0; flip < 2; ++flip) {
      const std::uint32_t p = phase_.load(std::memory_order_relaxed);
      phase_.store(p + 1, std::memory_order_seq_cst);
      while (readers_[p & 1].load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    }
  }

  // Publishes `next`; frees the old list once no emitter can hold it, if `wait` and
  // this thread is not emitting this list; otherwise keeps it for later. Under mu_.
  void replace(std::unique_ptr<Node> next, bool wait) {
    std::uint32_t kinds = 0;
    for (const Entry& e : next->entries) kinds |= e.kinds;
    count_.store(next->entries.size(), std::memory_order_relaxed);
    kinds_.store(kinds, std::memory_order_relaxed);
    const Node* old = head_.exchange(next.release(), std::memory_order_seq_cst);
    retired_.push_back(old);
    if (!wait || emitting_here()) return;
    synchronize();
    for (const Node* n : retired_) delete n;
    retired_.clear();
  }

  std::mutex mu_;  // serialises add and remove
  std::atomic<Node*> head_;
  mutable std::atomic<std::uint64_t> readers_[2] = {0, 0};
  std::atomic<std::uint32_t> phase_{0};
  std::atomic<std::size_t> count_{0};
  std::atomic<std::uint32_t> kinds_{0};
  std::vector<const Node*> retired_;  // under mu_
  ListenerId next_id_;
  const ListenerId step_;
};

}  // namespace detail
}  // namespace bulwark

#endif  // BULWARK_BREAKER_EVENTS_H_
