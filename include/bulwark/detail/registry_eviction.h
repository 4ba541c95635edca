// Internal: a registry's idle sweep. Not part of the public API.
//
// No thread, no timer: eviction runs in bounded steps taken by the requests
// themselves. A step moves a shard's cursor over its table's slots and asks, for each
// entry, the CLOCK question (registry_ref.h): used or referenced since the last look —
// second chance, its idle time starts again; idle for the TTL, unreferenced and
// CLOSED — evicted. A lookup never reads the clock for this: one lookup in
// kLookupsPerCheck (per thread) reads the coarse clock and, when the shard's next step
// is due (every TTL / 8, at least ~1 ms), try-locks the shard and takes one step.

#ifndef BULWARK_DETAIL_REGISTRY_EVICTION_H_
#define BULWARK_DETAIL_REGISTRY_EVICTION_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "bulwark/clock.h"
#include "bulwark/detail/registry_ref.h"
#include "bulwark/detail/registry_table.h"

namespace bulwark::detail {

// The idle rule of one registry: its TTL in reference-word units and its step cadence.
struct IdlePolicy {
  static constexpr std::uint32_t kLookupsPerCheck = 64;

  explicit IdlePolicy(Nanos idle_ttl) noexcept
      : ttl(idle_ttl),
        ttl_units(idle_ttl > Nanos::zero() ? (static_cast<std::uint64_t>(idle_ttl.count()) +
                                              (std::uint64_t{1} << RegistryRef::kUnitShift) - 1) >>
                                                 RegistryRef::kUnitShift
                                           : 0),
        interval(std::max<Ticks>(idle_ttl.count() / 8, Ticks{1} << RegistryRef::kUnitShift)) {}

  bool enabled() const noexcept { return ttl_units != 0; }

  // True on one call in kLookupsPerCheck on this thread: time to look at the clock.
  static bool check_now() noexcept {
    static thread_local std::uint32_t lookups = 0;
    return ++lookups % kLookupsPerCheck == 0;
  }

  Nanos ttl;
  std::uint64_t ttl_units;
  Ticks interval;
};

// When a shard's next step is due. Read by lookups without a lock.
struct StepGate {
  std::atomic<Ticks> next{kTicksMin};
  bool due(Ticks now) const noexcept { return now >= next.load(std::memory_order_relaxed); }
  void schedule(Ticks now, Ticks interval) noexcept {
    next.store(saturating_add(now, interval), std::memory_order_relaxed);
  }
};

// One bounded step over `table` from `cursor`: visits up to `budget` slots and evicts
// at most `budget` entries, so at most 2 x budget slot visits. try_evict(index, pos)
// returns true if it erased slot `pos` (then that slot is looked at again: erase may
// have moved another entry into it). Under the shard's mutex. Returns the evictions.
template <class TryEvict>
std::size_t sweep_step(const SlotTable& table, std::size_t& cursor, std::size_t budget,
                       TryEvict&& try_evict) {
  std::size_t evicted = 0;
  for (std::size_t advanced = 0; advanced < budget && table.size() > 0;) {
    const std::size_t i = table.wrap(cursor);
    const std::uint64_t v = table.at(i);
    if (v != 0 && evicted < budget && try_evict(SlotTable::index_of(v), i)) {
      ++evicted;
      continue;
    }
    cursor = i + 1;
    ++advanced;
  }
  return evicted;
}

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_REGISTRY_EVICTION_H_
