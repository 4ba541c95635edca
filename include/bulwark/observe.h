// bulwark/observe.h — events that integrations forward to logs, and how to listen.
//
// A circuit that opens and nobody knows turns a visible problem into a silent one.
// Metrics (metrics.h, prometheus.h) answer "how often, how long"; events
// answer "what just happened, to whom": a breaker changed state, a call was rejected,
// a fallback answered, a breaker started flapping, a registry created or evicted a key.
//
//   bulwark::EventHub& hub = registry.events();
//   bulwark::Subscription sub = hub.subscribe(
//       bulwark::EventKind::transition | bulwark::EventKind::flapping,
//       [](const bulwark::Event& e) { log_info(bulwark::to_logfmt(e)); });
//   // event=transition name=reviews key=host-7:443 from=closed to=open reason=consecutive_failures
//   at=12.5
//   ...
//   sub.reset();   // or let it go out of scope: the listener is removed
//
// Sources. A registry emits every kind for its keys (registry.h): transitions and
// flapping from its breakers, rejections by its breakers (try_acquire) and by the
// per-key bulkheads it builds, fallbacks of pipeline stages given a Handle
// (`bulwark::fallback(f).counted_by(handle)`), key creation and eviction. Outside a
// registry, forward_transitions() feeds a hub from a breaker policy. bulwark::http's
// clients also emit `retry` (RetryInfo) on their registry's hub.
//
// Events are delivered synchronously, on the thread whose request caused them, after
// the change is visible and while no bulwark lock is held; a listener that throws is
// ignored. A listener may call back into bulwark. Keep listeners short: a slow listener
// slows the request that triggered it. Rejections can arrive by the hundred thousand per
// second during an incident; subscribe to them only with a listener that can take it
// (count, sample, or rate-limit before logging).
//
// Cost. With no listener for a kind, emitting that kind is one relaxed load (wants()),
// and the caller skips building the event. With listeners, emitting loads an immutable
// listener list through an atomic shared_ptr (no mutex, no allocation) and calls each
// listener whose mask matches. Adding or removing a listener copies the list (rare).

#ifndef BULWARK_OBSERVE_H_
#define BULWARK_OBSERVE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "bulwark/breaker_events.h"
#include "bulwark/bulkhead.h"
#include "bulwark/circuit_breaker.h"
#include "bulwark/clock.h"
#include "bulwark/detail/permit_base.h"

namespace bulwark {

enum class EventKind : std::uint8_t {
  transition = 0,   // a breaker changed state
  rejection = 1,    // a breaker (RejectionInfo) or bulkhead (BulkheadRejectionInfo) refused a call
  fallback = 2,     // a fallback answered instead of the dependency (FallbackInfo)
  flapping = 3,     // a breaker started or stopped flapping (opening again and again)
  key_created = 4,  // a registry created the entry for a key
  key_evicted = 5,  // a registry evicted an idle key
  retry = 6,        // a failed attempt is tried again (RetryInfo; bulwark::http's clients)
};
inline constexpr int kEventKindCount = 7;

constexpr std::string_view to_string(EventKind k) noexcept {
  switch (k) {
    case EventKind::transition:
      return "transition";
    case EventKind::rejection:
      return "rejection";
    case EventKind::fallback:
      return "fallback";
    case EventKind::flapping:
      return "flapping";
    case EventKind::key_created:
      return "key_created";
    case EventKind::key_evicted:
      return "key_evicted";
    case EventKind::retry:
      return "retry";
  }
  return "unknown";
}

// A set of event kinds: `EventKind::transition | EventKind::rejection`, EventMask::all().
class EventMask {
 public:
  constexpr EventMask() noexcept = default;
  constexpr EventMask(EventKind k) noexcept : bits_(bit(k)) {}  // NOLINT: a kind is a set of one
  static constexpr EventMask all() noexcept { return EventMask((1u << kEventKindCount) - 1); }
  static constexpr EventMask none() noexcept { return EventMask(); }
  constexpr bool contains(EventKind k) const noexcept { return (bits_ & bit(k)) != 0; }
  constexpr std::uint32_t bits() const noexcept { return bits_; }
  friend constexpr EventMask operator|(EventMask a, EventMask b) noexcept {
    return EventMask(a.bits_ | b.bits_);
  }
  friend constexpr bool operator==(EventMask, EventMask) noexcept = default;

 private:
  constexpr explicit EventMask(std::uint32_t bits) noexcept : bits_(bits) {}
  static constexpr std::uint32_t bit(EventKind k) noexcept {
    return 1u << static_cast<unsigned>(k);
  }
  std::uint32_t bits_ = 0;
};

constexpr EventMask operator|(EventKind a, EventKind b) noexcept {
  return EventMask(a) | EventMask(b);
}

// What changed. One of these is an Event's payload.
struct TransitionInfo {
  State from;
  State to;
  TransitionReason reason;
  std::uint32_t generation;  // the breaker's generation after the transition
};

// A breaker refused a call.
struct RejectionInfo {
  RejectReason reason;
  Nanos retry_after;  // when a probe may be admitted (Rejection::retry_after)
};

// A bulkhead refused a call (an event of kind `rejection` too). Emitted by a registry
// for the per-key bulkheads it builds (registry.h); the event's name is the bulkhead's
// and its source the bulkhead's address.
struct BulkheadRejectionInfo {
  BulkheadRejectReason reason;
};

// What a retry made of the failed attempt's Retry-After.
enum class RetryAfterUse : std::uint8_t {
  none = 0,      // none was sent: the backoff applied
  honoured = 1,  // it replaced the backoff
  ignored = 2,   // malformed, too long or sent twice: the backoff applied
};

constexpr std::string_view to_string(RetryAfterUse u) noexcept {
  switch (u) {
    case RetryAfterUse::none:
      return "none";
    case RetryAfterUse::honoured:
      return "honoured";
    case RetryAfterUse::ignored:
      return "ignored";
  }
  return "unknown";
}

// A failed attempt is tried again (emitted as the retry starts, after its wait).
struct RetryInfo {
  std::uint32_t attempt;      // the attempt starting now: 2 for the first retry
  RetryAfterUse retry_after;  // what became of the failed attempt's Retry-After
  Nanos retry_after_delay;    // the honoured Retry-After; zero otherwise
};

// Why a fallback answered: no attempt reached the dependency (a breaker or bulkhead
// said no, or the retry budget / deadline stopped the call first), or attempts ran and
// failed.
enum class FallbackKind : std::uint8_t { rejected = 0, failed = 1 };

constexpr std::string_view to_string(FallbackKind k) noexcept {
  return k == FallbackKind::rejected ? "rejected" : "failed";
}

// A fallback stage answered. Emitted through a registry Handle given to the stage:
// `bulwark::fallback(f).counted_by(handle)` (fallback.h, registry.h).
struct FallbackInfo {
  FallbackKind kind;
  std::string_view reason;  // the pipeline's reason, e.g. "breaker_open" (fallback.h's Reason)
};

// A breaker is flapping when it reopens within `period` (its flapping_period) of
// having recovered: a "flickering" circuit. The breaker flags the opening; a
// registry (or forward_transitions()) emits this event right after that transition.
// That it stopped flapping is not an event: the snapshot (and the flapping gauge) say
// so once it has stayed closed for a period.
struct FlappingInfo {
  bool flapping;
  Nanos period;
};

// A registry created or evicted a key. `idle` is how long it had been idle (eviction).
struct KeyInfo {
  Nanos idle;
};

struct Event {
  EventKind kind;
  // The component's configured name (BreakerConfig::name), its registry key rendered as
  // text (empty outside registries), and its identity (the breaker's address), as in
  // TransitionEvent. The views are valid only during the listener call.
  std::string_view name;
  std::string_view key;
  const void* source;
  Ticks at;  // clock time of the event
  std::variant<TransitionInfo, RejectionInfo, FallbackInfo, FlappingInfo, KeyInfo,
               BulkheadRejectionInfo, RetryInfo>
      info;
};

// Builds the Event for a breaker's TransitionEvent, with the key it belongs to.
inline Event make_event(const TransitionEvent& e, std::string_view key = {}) noexcept {
  return Event{EventKind::transition,
               e.name,
               key,
               e.breaker,
               e.at,
               TransitionInfo{e.from, e.to, e.reason, e.generation}};
}

// The event as one logfmt line (no trailing newline), e.g.
//   event=rejection name=reviews key="host 7" reason=open retry_after=29.5 at=120.25
//   event=rejection name=reviews-pool key="host 7" component=bulkhead reason=full at=120.25
// Values with spaces, quotes, '=' or control characters are quoted and escaped, so a
// key can never forge another field. Times are in seconds. Allocates the string.
std::string to_logfmt(const Event& event);
// Appends the same line to `out`.
void append_logfmt(std::string& out, const Event& event);

using EventListener = std::function<void(const Event&)>;

class EventHub;

// Forwards a policy's transitions (and the flapping they reveal) to `hub`, for
// breakers outside a registry: one hub can then carry everything an integration logs.
// Returns the listener's id: policy.remove_listener(id) before the hub goes away.
template <class Policy>
ListenerId forward_transitions(Policy& policy, EventHub& hub);

// Removes its listener when destroyed or reset(). Move-only. Must not outlive its hub.
namespace detail {
struct SubscriptionTraits {
  using Owner = EventHub;
  struct Data {
    ListenerId id = 0;
  };
  static void abandon(EventHub& hub, const Data& d) noexcept;
};
}  // namespace detail

class [[nodiscard]] Subscription : public detail::PermitBase<detail::SubscriptionTraits> {
 public:
  Subscription() noexcept = default;
  Subscription(EventHub* hub, ListenerId id) noexcept : PermitBase(hub, {id}) {}

  // Removes the listener now (idempotent).
  void reset() noexcept { abandon(); }
  // Keeps the listener registered for the hub's lifetime; returns its id.
  ListenerId release() noexcept {
    (void)take();
    return data().id;
  }
  ListenerId id() const noexcept { return data().id; }
};

// A set of listeners, each with the kinds it wants. Thread-safe: subscribe,
// unsubscribe and emit may run concurrently from any threads.
class EventHub {
 public:
  EventHub() = default;
  EventHub(const EventHub&) = delete;
  EventHub& operator=(const EventHub&) = delete;

  // Adds `listener` for the kinds in `mask`. Allocates (copies the list). The returned
  // Subscription removes it; call release() on it to keep the listener for good.
  Subscription subscribe(EventMask mask, EventListener listener);
  // Removes a listener; returns false if it was not there. A call already running on
  // another thread finishes (keep what a listener uses in a shared_ptr it captures if
  // it may be removed while events flow).
  bool unsubscribe(ListenerId id);

  // True if some listener wants `kind`: one relaxed load. Emitters test it before
  // building an event, so an unobserved event costs nothing more.
  bool wants(EventKind kind) const noexcept {
    return (listeners_.kinds() & EventMask(kind).bits()) != 0;
  }
  // Calls every listener that wants `event.kind`, in subscription order, on this
  // thread. Never throws, never allocates, takes no lock (the breaker's lock-free
  // listener list, breaker_events.h).
  void emit(const Event& event) const noexcept {
    listeners_.emit(event, EventMask(event.kind).bits());
  }

  std::size_t size() const noexcept { return listeners_.size(); }

 private:
  detail::ListenerList<Event> listeners_;
};

inline void detail::SubscriptionTraits::abandon(EventHub& hub, const Data& d) noexcept {
  (void)hub.unsubscribe(d.id);
}

namespace detail {

// Emits a transition, then a flapping event if the breaker flagged the opening (a
// breaker without flapping detection has no such flag).
inline void emit_transition(const EventHub& hub, const TransitionEvent& e, std::string_view key,
                            Nanos period) {
  if (hub.wants(EventKind::transition)) hub.emit(make_event(e, key));
  if constexpr (requires { e.flapping; }) {
    if (e.flapping && hub.wants(EventKind::flapping)) {
      hub.emit(
          Event{EventKind::flapping, e.name, key, e.breaker, e.at, FlappingInfo{true, period}});
    }
  }
}

// A breaker's (or policy's) flapping_period, or zero if it has none.
template <class T>
Nanos flapping_period(const T& breaker_or_policy) noexcept {
  if constexpr (requires { breaker_or_policy.config().flapping_period; }) {
    return breaker_or_policy.config().flapping_period;
  } else {
    return Nanos::zero();
  }
}

}  // namespace detail

template <class Policy>
ListenerId forward_transitions(Policy& policy, EventHub& hub) {
  return policy.on_transition(
      [&hub, period = detail::flapping_period(policy)](const TransitionEvent& e) {
        detail::emit_transition(hub, e, std::string_view(), period);
      });
}

}  // namespace bulwark

#endif  // BULWARK_OBSERVE_H_
