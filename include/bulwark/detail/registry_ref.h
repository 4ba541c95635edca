// Internal: a registry entry's reference word. Not part of the public API.
//
// One atomic 64-bit word says whether an entry is live, how many Handles, Calls and
// permits pin it, whether a lookup used it since the last eviction step, and since when
// it has been idle:
//
//   [ count : 23 | dead : 1 | used : 1 | idle since : 39 ]   (bit 63 .. bit 0)
//
// `idle since` is in units of 2^20 ticks (~1 ms) and wraps after ~17 years. A lookup
// pins with one CAS that also sets `used`; letting go is one atomic subtract. An
// eviction step kills an entry with one CAS that succeeds only while the count is zero,
// so a pin and a kill never both succeed. Thread-safe; nothing here allocates or locks.

#ifndef BULWARK_DETAIL_REGISTRY_REF_H_
#define BULWARK_DETAIL_REGISTRY_REF_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "bulwark/clock.h"
#include "bulwark/detail/bitfield.h"

namespace bulwark::detail {

struct RegistryRef {
  using IdleSince = Field<0, 39>;
  using Used = Field<39, 1, bool>;
  using Dead = Field<40, 1, bool>;
  using Count = Field<41, 23>;
  using Word = Layout<IdleSince, Used, Dead, Count>;
  static_assert(Word::used == ~std::uint64_t{0}, "the reference word uses every bit");

  static constexpr unsigned kUnitShift = 20;  // idle time unit: 2^20 ticks (~1.05 ms)
  static constexpr std::uint64_t kOne = Count::value(1);

  // A clock reading in idle-time units, as the word keeps it.
  static constexpr std::uint64_t units(Ticks t) noexcept {
    return (static_cast<std::uint64_t>(t) >> kUnitShift) & IdleSince::max;
  }
  // Units from `since` to `now`, modulo the field's range.
  static constexpr std::uint64_t elapsed(std::uint64_t since, std::uint64_t now) noexcept {
    return (now - since) & IdleSince::max;
  }

  // What an eviction step makes of an entry.
  enum class Verdict : std::uint8_t {
    gone,   // dead already (free, or being retired)
    busy,   // used since the last step or referenced now: its idle time starts again
    young,  // idle for less than the TTL
    idle,   // idle for at least the TTL and unreferenced: may be killed with `word`
  };

  std::atomic<std::uint64_t> word{Dead::mask};

  bool dead(std::memory_order order = std::memory_order_acquire) const noexcept {
    return Dead::get(word.load(order));
  }
  std::uint64_t refs() const noexcept { return Count::get(word.load(std::memory_order_relaxed)); }
  std::uint64_t idle_since() const noexcept {
    return IdleSince::get(word.load(std::memory_order_relaxed));
  }

  // Makes a dead entry live with `count` references, idle since `now_units`. The
  // release store publishes everything written to the entry before.
  void publish(std::uint64_t count, std::uint64_t now_units) noexcept {
    word.store(Word::make(Count::value(count), IdleSince::value(now_units)),
               std::memory_order_release);
  }

  // Takes a reference unless the entry is dead; `use` marks it used (a lookup does,
  // a walk over the entries does not). One CAS, retried only under contention.
  bool pin(bool use) noexcept {
    std::uint64_t w = word.load(std::memory_order_relaxed);
    for (;;) {
      if (Dead::get(w)) return false;
      if (Count::get(w) == Count::max) overflow();
      const std::uint64_t next = use ? Used::set(w + kOne, true) : w + kOne;
      if (word.compare_exchange_weak(w, next, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
        return true;
      }
    }
  }
  // Another reference to an entry already pinned (a copied Handle).
  void retain() noexcept { word.fetch_add(kOne, std::memory_order_relaxed); }
  // Lets one reference go.
  void release() noexcept { word.fetch_sub(kOne, std::memory_order_release); }

  // The CLOCK step: an entry used or referenced since the last look gets a second
  // chance (its idle time restarts at now_units); otherwise reports whether it has been
  // idle for ttl_units. `w` receives the word the verdict was made on.
  Verdict examine(std::uint64_t now_units, std::uint64_t ttl_units, std::uint64_t& w) noexcept {
    w = word.load(std::memory_order_relaxed);
    if (Dead::get(w)) return Verdict::gone;
    if (Used::get(w) || Count::get(w) != 0) {
      // Losing this CAS to a lookup means the entry was just used anyway.
      word.compare_exchange_strong(w, IdleSince::set(Used::set(w, false), now_units),
                                   std::memory_order_relaxed);
      return Verdict::busy;
    }
    // "+1" because both ends are rounded down to a unit: never early.
    return elapsed(IdleSince::get(w), now_units) < ttl_units + 1 ? Verdict::young : Verdict::idle;
  }

  // Kills an unreferenced entry whose word is still `w`; false if someone pinned it.
  bool kill(std::uint64_t w) noexcept {
    if (Count::get(w) != 0) return false;
    return word.compare_exchange_strong(w, Dead::set(w, true), std::memory_order_acquire,
                                        std::memory_order_relaxed);
  }
  // Undoes kill(): the entry turned out to be worth keeping. `w` is the word kill() saw.
  void revive(std::uint64_t w) noexcept { word.store(w, std::memory_order_release); }

 private:
  [[noreturn]] static void overflow() noexcept {
    // 8 million live references to one key is a leak, not a workload.
    std::abort();
  }
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_REGISTRY_REF_H_
