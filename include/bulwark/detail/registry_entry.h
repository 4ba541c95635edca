// Internal: one registry entry and what an Extra offers the registry. Not part of the
// public API (NoExtra is: registry.h documents it).
//
// An entry is 64-byte aligned and starts with its breaker, so the breaker's address is
// the entry's. Then the header — reference word, outage start, metrics block pointer,
// incarnation — which lives as long as the registry's storage, and the payload — key
// and Extra — which, with the breaker, exists only while the entry is live and is
// poisoned for AddressSanitizer otherwise. 128 bytes for std::string keys and the
// default breaker. construct() and destroy() are called by the registry under its
// rules (the entry unreachable by readers, or dead); nothing here synchronises.

#ifndef BULWARK_DETAIL_REGISTRY_ENTRY_H_
#define BULWARK_DETAIL_REGISTRY_ENTRY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "bulwark/bulkhead.h"
#include "bulwark/clock.h"
#include "bulwark/detail/registry_arena.h"
#include "bulwark/detail/registry_ref.h"
#include "bulwark/fallback.h"
#include "bulwark/metrics.h"

namespace bulwark {

// The default per-key extra: nothing.
struct NoExtra {};

namespace detail {

template <std::size_t Size, std::size_t Align>
struct alignas(Align > 8 ? Align : 8) RawStorage {
  unsigned char bytes[(Size + 7) / 8 * 8];
};
struct NoStorage {};

template <class Key, class Breaker, class Extra>
struct alignas(64) RegistryEntry {
  static constexpr bool kHasExtra = !std::is_same_v<Extra, NoExtra>;
  using ExtraStorage =
      std::conditional_t<kHasExtra, RawStorage<sizeof(Extra), alignof(Extra)>, NoStorage>;

  alignas(Breaker) unsigned char breaker_bytes[sizeof(Breaker)];
  RegistryRef ref;
  std::atomic<Ticks> outage_since{kNoOutage};
  BreakerMetrics* metrics = nullptr;
  std::uint64_t incarnation = 0;
  RawStorage<sizeof(Key), alignof(Key)> key_bytes;
  [[no_unique_address]] ExtraStorage extra_bytes;

  Breaker& breaker() noexcept { return *std::launder(reinterpret_cast<Breaker*>(breaker_bytes)); }
  const Key& key() noexcept { return *std::launder(reinterpret_cast<Key*>(key_bytes.bytes)); }
  Extra& extra() noexcept requires kHasExtra {
    return *std::launder(reinterpret_cast<Extra*>(extra_bytes.bytes));
  }

  // Builds the payload: the breaker on `policy`, the key, and the Extra as
  // make_extra(key) returns it (built in place: it need not be movable). If anything
  // throws, what was built is destroyed, the payload poisoned again, and the exception
  // propagates. Resets the header's per-life state.
  template <class Policy, class MakeExtra>
  void construct(const Policy& policy, Key&& k, MakeExtra&& make_extra) {
    unpoison();
    int built = 0;  // breaker, key
#if defined(__cpp_exceptions)
    try {
#endif
      ::new (static_cast<void*>(breaker_bytes)) Breaker(policy);
      built = 1;
      ::new (static_cast<void*>(key_bytes.bytes)) Key(std::move(k));
      built = 2;
      if constexpr (kHasExtra)
        ::new (static_cast<void*>(extra_bytes.bytes)) Extra(make_extra(key()));
#if defined(__cpp_exceptions)
    } catch (...) {
      if (built == 2) std::destroy_at(&key());
      if (built >= 1) breaker().~Breaker();
      poison();
      throw;
    }
#endif
    (void)built;
    (void)make_extra;
    outage_since.store(kNoOutage, std::memory_order_relaxed);
    if (metrics != nullptr) metrics->reset();
  }

  void destroy() noexcept {
    if constexpr (kHasExtra) std::destroy_at(&extra());
    std::destroy_at(&key());
    breaker().~Breaker();
    poison();
  }

  // A reference that outlived its entry would touch a dead payload: under
  // AddressSanitizer that is a report instead of a silent read of a reused entry.
  void poison() noexcept {
    detail::poison(breaker_bytes, sizeof(breaker_bytes));
    detail::poison(&key_bytes, sizeof(key_bytes));
    if constexpr (kHasExtra) detail::poison(&extra_bytes, sizeof(extra_bytes));
  }
  void unpoison() noexcept {
    detail::unpoison(breaker_bytes, sizeof(breaker_bytes));
    detail::unpoison(&key_bytes, sizeof(key_bytes));
    if constexpr (kHasExtra) detail::unpoison(&extra_bytes, sizeof(extra_bytes));
  }
};

// ---- what an Extra offers ------------------------------------------------------------

// It reports its components' counters: `void read_metrics(ComponentReading&)`.
template <class Extra>
inline constexpr bool kExtraReports = requires(Extra& x, ComponentReading& r) {
  x.read_metrics(r);
};

// Hands a bulkhead observer to the Extra's bulkheads: its own observe_rejections, or
// its `bulkhead` member's. Nothing otherwise.
template <class Extra>
void observe_extra_bulkheads(Extra& x, const BulkheadObserver& observer) noexcept {
  if constexpr (requires { x.observe_rejections(observer); }) {
    x.observe_rejections(observer);
  } else if constexpr (requires { x.bulkhead.observe_rejections(observer); }) {
    x.bulkhead.observe_rejections(observer);
  } else {
    (void)x;
    (void)observer;
  }
}

template <class T>
struct IsFallbackStage : std::false_type {};
template <class F>
struct IsFallbackStage<FallbackStage<F>> : std::true_type {};
template <class T>
struct IsBulkhead : std::false_type {};
template <class C>
struct IsBulkhead<BasicBulkhead<C>> : std::true_type {};

// The Extra is a BasicBulkhead or has one named `bulkhead`: execute()'s bulkhead stage.
template <class Extra>
constexpr bool extra_has_bulkhead() {
  if constexpr (IsBulkhead<Extra>::value) {
    return true;
  } else if constexpr (requires(Extra & x) { x.bulkhead; }) {
    return IsBulkhead<std::remove_cvref_t<decltype(std::declval<Extra&>().bulkhead)>>::value;
  } else {
    return false;
  }
}
template <class Extra>
auto& bulkhead_of(Extra& x) noexcept {
  if constexpr (IsBulkhead<Extra>::value) {
    return x;
  } else {
    return x.bulkhead;
  }
}
// The Extra has a FallbackStage named `fallback`: execute()'s fallback stage.
template <class Extra>
constexpr bool extra_has_fallback() {
  if constexpr (requires(Extra & x) { x.fallback; }) {
    return IsFallbackStage<std::remove_cvref_t<decltype(std::declval<Extra&>().fallback)>>::value;
  } else {
    return false;
  }
}

// ---- retired entries -------------------------------------------------------------------

// The counters of a shard's evicted and removed entries, so registry totals never go
// down. Written and read under the shard's mutex.
struct RetiredTotals {
  BreakerReading breaker;
  HistogramReading latency;
  ComponentReading components;

  // Folds in every counter a scrape reads from a live entry.
  template <class Entry>
  void absorb(Entry& e) {
    const BreakerReading b = read_breaker(e.breaker());
    breaker.successes += b.successes;
    breaker.failures += b.failures;
    breaker.ignored += b.ignored;
    breaker.cancelled += b.cancelled;
    breaker.rejected += b.rejected;
    breaker.opens += b.opens;
    breaker.has_slow = breaker.has_slow || b.has_slow;
    breaker.slow_successes += b.slow_successes;
    breaker.slow_failures += b.slow_failures;
    if (e.metrics != nullptr) {
      latency.add(e.metrics->latency.read());
      ComponentReading c;
      e.metrics->components.read_into(c);
      components.merge_counters(c);
    }
    if constexpr (Entry::kHasExtra) {
      if constexpr (kExtraReports<std::remove_cvref_t<decltype(e.extra())>>) {
        ComponentReading c;
        e.extra().read_metrics(c);
        components.merge_counters(c);
      }
    }
  }
};

// An evicted key, announced once the shard's mutex is released.
struct EvictedKey {
  std::string name;
  std::string key;
  Nanos idle;
};

}  // namespace detail
}  // namespace bulwark

#endif  // BULWARK_DETAIL_REGISTRY_ENTRY_H_
