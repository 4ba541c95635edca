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
  }
  return "unknown";
}

struct TransitionEvent {
  std::string_view name;  // the breaker's configured name
  const void* breaker;    // identity of the breaker that changed (for registries)
  State from;
  State to;
  TransitionReason reason;
  Ticks at;  // clock time of the transition
  // The breaker's generation after the transition: +1 per transition, including the
  // silent ones (a reset while CLOSED, a fresh half-open round); wraps at 2^19.
  std::uint32_t generation;
  // An opening that came within flapping_period of the breaker's last recovery.
  bool flapping = false;
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

// Copy-on-write list of listeners. Adding and removing take a mutex (only against each
// other, never on a call's path). Emitting is lock-free: with none registered it is
// one relaxed load; otherwise one atomic add to borrow the current list, the
// listeners run with nothing held, and one atomic step to give it back.
//
// (std::atomic<std::shared_ptr> would be simpler, but libstdc++ implements it with a
// spin lock.) The list's address and the number of emitters borrowing it share one
// word, `head_`: [borrowers 16 | pointer 48]. An emitter adds one borrower and gets
// the pointer in the same step; it gives the list back by subtracting it again if the
// list is still current. A writer swaps in a new list and moves the borrower count it
// found into the old list's `balance`; emitters that then give back the old list count
// it down there, and whoever brings it to zero frees it. Nothing ever waits, so a
// listener may add or remove listeners, its own included.
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
      : head_(pack(new Node{})), next_id_(first), step_(step) {}
  ListenerList(const ListenerList&) = delete;
  ListenerList& operator=(const ListenerList&) = delete;
  ~ListenerList() { delete node(head_.load(std::memory_order_acquire)); }

  ListenerId add(Listener listener, std::uint32_t kinds = kAllKinds) {
    std::lock_guard lock(mu_);
    auto next = std::make_unique<Node>(*node(head_.load(std::memory_order_acquire)));
    const ListenerId id = next_id_;
    next_id_ += step_;
    next->entries.push_back(Entry{id, kinds, std::move(listener)});
    publish(std::move(next));
    return id;
  }

  bool remove(ListenerId id) {
    std::lock_guard lock(mu_);
    auto next = std::make_unique<Node>(*node(head_.load(std::memory_order_acquire)));
    auto& e = next->entries;
    const auto it = std::find_if(e.begin(), e.end(), [id](const Entry& x) { return x.id == id; });
    if (it == e.end()) return false;
    e.erase(it);
    publish(std::move(next));
    return true;
  }

  // Calls, in the order they were added, the listeners that want `kind`.
  void emit(const Event& event, std::uint32_t kind = kAllKinds) const noexcept {
    const Node* n = node(head_.fetch_add(kBorrower, std::memory_order_acquire));
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
    give_back(n);
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
    Node() = default;
    Node(const Node& other) : entries(other.entries) {}
    std::vector<Entry> entries;
    // Once replaced: borrowers the writer found, minus those that gave it back since.
    mutable std::atomic<std::int64_t> balance{0};
  };

  static constexpr unsigned kPointerBits = 48;
  static constexpr std::uint64_t kBorrower = std::uint64_t{1} << kPointerBits;
  static constexpr std::uint64_t kPointerMask = kBorrower - 1;

  static std::uint64_t pack(const Node* n) noexcept {
    const auto bits = reinterpret_cast<std::uintptr_t>(n);
    // User-space addresses on x86-64 and AArch64 fit 48 bits.
    if ((bits & ~kPointerMask) != 0) std::abort();
    return bits;
  }
  static Node* node(std::uint64_t head) noexcept {
    return reinterpret_cast<Node*>(static_cast<std::uintptr_t>(head & kPointerMask));
  }

  void give_back(const Node* n) const noexcept {
    std::uint64_t cur = head_.load(std::memory_order_relaxed);
    while (node(cur) == n) {
      if (head_.compare_exchange_weak(cur, cur - kBorrower, std::memory_order_release,
                                      std::memory_order_relaxed))
        return;
    }
    // Replaced while we read it: the writer moved our borrow into the node's balance.
    if (n->balance.fetch_sub(1, std::memory_order_acq_rel) == 1) delete n;
  }

  void publish(std::unique_ptr<Node> next) {
    std::uint32_t kinds = 0;
    for (const Entry& e : next->entries) kinds |= e.kinds;
    count_.store(next->entries.size(), std::memory_order_relaxed);
    kinds_.store(kinds, std::memory_order_relaxed);
    const std::uint64_t old = head_.exchange(pack(next.release()), std::memory_order_acq_rel);
    const auto borrowers = static_cast<std::int64_t>(old >> kPointerBits);
    const Node* n = node(old);
    if (n->balance.fetch_add(borrowers, std::memory_order_acq_rel) + borrowers == 0) delete n;
  }

  std::mutex mu_;  // serialises add and remove
  mutable std::atomic<std::uint64_t> head_;
  std::atomic<std::size_t> count_{0};
  std::atomic<std::uint32_t> kinds_{0};
  ListenerId next_id_;
  const ListenerId step_;
};

}  // namespace detail
}  // namespace bulwark

#endif  // BULWARK_BREAKER_EVENTS_H_
