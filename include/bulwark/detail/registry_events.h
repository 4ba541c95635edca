// Internal: how a registry's events reach their key. Not part of the public API.
//
// Every key's breaker shares a policy whose transition listener receives the
// breaker's address. owner_of() turns it into the entry in O(1): one probe of the
// SegmentDirectory (registry_arena.h) and an offset check; an address in no segment,
// or not at an entry's start, is a breaker that is not the registry's (one built by
// someone else from a copied policy) and is ignored. The other events already know
// their entry: a rejection comes through a Handle, a bulkhead refusal through the
// observer the registry attached to that entry's Extra, a fallback answer through a
// Handle. Each emit reads the clock and builds key text only when a listener wants
// that kind. Thread-safe: called on the thread that caused the event, which holds a
// reference to the entry.

#ifndef BULWARK_DETAIL_REGISTRY_EVENTS_H_
#define BULWARK_DETAIL_REGISTRY_EVENTS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "bulwark/breaker_events.h"
#include "bulwark/bulkhead.h"
#include "bulwark/clock.h"
#include "bulwark/detail/registry_arena.h"
#include "bulwark/detail/registry_entry.h"
#include "bulwark/detail/registry_hash.h"
#include "bulwark/fallback.h"
#include "bulwark/metrics.h"
#include "bulwark/observe.h"

namespace bulwark::detail {

template <class Entry>
struct KeyedEvents {
  EventHub hub;
  TransitionCounts transitions;  // every breaker's, evicted or not
  SegmentDirectory directory;    // breaker address -> entry segment

  // The entry a breaker address belongs to, or nullptr. O(1), lock-free.
  Entry* owner_of(const void* breaker) const noexcept {
    const auto found = directory.find(breaker);
    if (found.base == nullptr) return nullptr;
    const auto offset =
        reinterpret_cast<std::uintptr_t>(breaker) - reinterpret_cast<std::uintptr_t>(found.base);
    if (offset >= Segments::size(found.k) * sizeof(Entry) || offset % sizeof(Entry) != 0)
      return nullptr;
    return reinterpret_cast<Entry*>(const_cast<unsigned char*>(found.base)) +
           offset / sizeof(Entry);
  }

  void on_transition(const TransitionEvent& ev) {
    Entry* e = owner_of(ev.breaker);
    if (e == nullptr) return;
    note_outage(e->outage_since, ev.from, ev.to, ev.at);
    if (e->metrics != nullptr) e->metrics->transitions.count(ev.from, ev.to);
    transitions.count(ev.from, ev.to);
    if (hub.wants(EventKind::transition) || hub.wants(EventKind::flapping)) {
      const Nanos period = flapping_period(e->breaker());
      with_key_text(e->key(), [&](std::string_view key) { emit_transition(hub, ev, key, period); });
    }
  }

  template <class Rejection, class C>
  void rejected(Entry& e, const Rejection& r, const C& clock) {
    if (!hub.wants(EventKind::rejection)) return;
    const Ticks at = now_ticks(clock);
    with_key_text(e.key(), [&](std::string_view key) {
      hub.emit(Event{EventKind::rejection, e.breaker().name(), key, &e.breaker(), at,
                     RejectionInfo{r.reason, r.retry_after}});
    });
  }

  template <class C>
  void bulkhead_rejected(Entry& e, const BulkheadRejectionEvent& ev, const C& clock) noexcept {
    if (!hub.wants(EventKind::rejection)) return;
    const Ticks at = now_ticks(clock);
    with_key_text(e.key(), [&](std::string_view key) {
      hub.emit(Event{EventKind::rejection, ev.name, key, ev.bulkhead, at,
                     BulkheadRejectionInfo{ev.reason}});
    });
  }

  template <class C>
  void fallback_answered(Entry& e, bool rejected, Reason reason, const C& clock) noexcept {
    const FallbackKind kind = rejected ? FallbackKind::rejected : FallbackKind::failed;
    if (e.metrics != nullptr) e.metrics->components.record_fallback(kind);
    if (!hub.wants(EventKind::fallback)) return;
    const Ticks at = now_ticks(clock);
    with_key_text(e.key(), [&](std::string_view key) {
      hub.emit(Event{EventKind::fallback, e.breaker().name(), key, &e.breaker(), at,
                     FallbackInfo{kind, to_string(reason)}});
    });
  }

  void key_event(EventKind kind, Entry& e, Ticks at, Nanos idle) {
    with_key_text(e.key(), [&](std::string_view key) {
      hub.emit(Event{kind, e.breaker().name(), key, &e.breaker(), at, KeyInfo{idle}});
    });
  }

  // Keys evicted under a shard's mutex, announced after it is released.
  template <class C>
  void announce_evicted(const std::vector<EvictedKey>& gone, const C& clock) {
    if (gone.empty()) return;
    const Ticks at = now_ticks(clock);
    for (const EvictedKey& ev : gone) {
      hub.emit(Event{EventKind::key_evicted, ev.name, ev.key, nullptr, at, KeyInfo{ev.idle}});
    }
  }
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_REGISTRY_EVENTS_H_
