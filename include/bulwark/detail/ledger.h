// Per-thread ledgers: the breakers' totals counted without a shared write.
//
// A breaker's totals (successes, failures, ignored, rejected) are counted where the
// calling thread owns the cache line: each thread has a table of cells, four-way set
// associative, and the cell a breaker's totals hold in their set (chosen by address)
// holds what this thread added to them since it took the cell. Adding one is a load, a
// compare (up to four, past the breaker's home cell) and a plain store (no
// read-modify-write, no lock); a breaker's totals are read by folding its shared base
// counters with its cell of every thread's table.
//
// A breaker takes a free cell of its set. When all are held by others, it counts a
// miss against its home cell and adds to its own base counters (one fetch_add, as if
// there were no ledger: a write to the breaker's line); after enough misses the thread
// moves the home cell's owner's counts into that owner's base counters and takes the
// cell. The table is large enough (2,048 cells) that a thread calling a thousand
// breakers in turn, a registry's keys say, keeps a cell for nearly every one of them. A thread's
// first count registers its table: it takes the table an exited thread left, or allocates one (once
// per thread, never freed, so the tables are as many as the most threads that ever counted at
// once). Its exit folds the table into the base counters. Folding and a breaker's destruction
// (which takes its cells back) look at one set per table, without a lock; the destruction waits
// for a thread that is moving one of its cells in that instant (a few stores).
//
// Exactness: read at rest (no call counting and no cell changing hands), a total is
// exact. While calls are in flight a fold may miss, or count twice, what one thread is
// moving from its cell to the base counters in that instant.

#ifndef BULWARK_DETAIL_LEDGER_H_
#define BULWARK_DETAIL_LEDGER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace bulwark::detail {

// A ledger counts up to four totals per object; a breaker's are these.
enum class Total : std::uint8_t { successes, failures, ignored, rejected };
inline constexpr std::size_t kTotals = 4;

// A breaker's shared base counters: what threads moved out of their cells, and what
// was counted without a cell.
struct Totals {
  std::array<std::atomic<std::uint64_t>, kTotals> base{};
};

struct LedgerCell {
  std::atomic<Totals*> owner{nullptr};  // kLedgerBusy while the thread moves the counts
  std::uint32_t misses = 0;             // other breakers' counts since the last move
  std::array<std::atomic<std::uint64_t>, kTotals> n{};
};

inline constexpr std::size_t kLedgerCellBits = 11;
inline constexpr std::size_t kLedgerCells = std::size_t{1} << kLedgerCellBits;  // 96 KiB
inline constexpr std::size_t kLedgerWays = 4;                                   // cells per set

// The calling thread's table, or null before its first count.
extern constinit thread_local LedgerCell* tls_ledger;

// The home cell of `t` in every thread's table; its set is the kLedgerWays cells from
// ledger_set(slot). The line's number times 2^64/phi (Fibonacci hashing): lines side by
// side (a registry's breakers) take cells spread evenly over the table, and runs of them
// from different allocations rarely fill one set.
[[gnu::always_inline]] inline std::size_t ledger_slot(const Totals* t) noexcept {
  const auto line = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(t) >> 6);
  return static_cast<std::size_t>((line * 0x9E3779B97F4A7C15ull) >> (64 - kLedgerCellBits));
}
constexpr std::size_t ledger_set(std::size_t slot) noexcept { return slot & ~(kLedgerWays - 1); }

// The calling thread's cell held by `t` in `cells`, or null.
[[gnu::always_inline]] inline LedgerCell* ledger_find(LedgerCell* cells, const Totals& t,
                                                      std::size_t slot) noexcept {
  LedgerCell* const set = cells + ledger_set(slot);
  for (std::size_t w = 0; w < kLedgerWays; ++w) {
    if (set[w].owner.load(std::memory_order_relaxed) == &t) return &set[w];
  }
  return nullptr;
}

// The slow path of ledger_add(): registers the thread, takes a free or long-missed
// cell, or adds to the base counter. True if it gave `t` a cell.
bool ledger_add_slow(Totals& t, Total which) noexcept;

// Adds one to total `which` of `t` for the calling thread. True if `t` took a cell of
// this thread's table (its destruction must then call ledger_forget()).
[[gnu::always_inline]] inline bool ledger_add(Totals& t, Total which) noexcept {
  if (LedgerCell* cells = tls_ledger) [[likely]] {
    const std::size_t slot = ledger_slot(&t);
    LedgerCell* c = &cells[slot];
    if (c->owner.load(std::memory_order_relaxed) != &t) [[unlikely]] {  // the set's others
      c = ledger_find(cells, t, slot);
      if (c == nullptr) return ledger_add_slow(t, which);
    }
    auto& n = c->n[static_cast<std::size_t>(which)];
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }
  return ledger_add_slow(t, which);
}

// The totals of `t`: its base counters plus its cell of every thread's table.
std::array<std::uint64_t, kTotals> ledger_fold(const Totals& t) noexcept;

// Takes `t`'s cells back from every table (its counts there are dropped). Call before
// `t` is destroyed, once no call on it is in progress.
void ledger_forget(const Totals& t) noexcept;

// Registers the calling thread's table now, if it has none (its first count would).
void ledger_join() noexcept;

// Four totals of an object that has no spare bit to remember whether it holds cells
// (a breaker keeps that bit in its own word): the totals and that bit, forgotten on
// destruction. Not copyable or movable (its address keys the cells).
class PerThreadTotals {
 public:
  PerThreadTotals() = default;
  PerThreadTotals(const PerThreadTotals&) = delete;
  PerThreadTotals& operator=(const PerThreadTotals&) = delete;
  ~PerThreadTotals() {
    if (ledgered_.load(std::memory_order_relaxed)) ledger_forget(totals_);
  }
  // Adds one to total `i` (< kTotals): as ledger_add().
  [[gnu::always_inline]] void add(std::size_t i) noexcept {
    if (ledger_add(totals_, static_cast<Total>(i))) [[unlikely]] {
      if (!ledgered_.load(std::memory_order_relaxed))
        ledgered_.store(true, std::memory_order_relaxed);
    }
  }
  std::array<std::uint64_t, kTotals> read() const noexcept { return ledger_fold(totals_); }

 private:
  Totals totals_;
  std::atomic<bool> ledgered_{false};
};

// How many tables exist (for tests: exited threads' tables are reused, not added to).
std::size_t ledger_tables() noexcept;

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_LEDGER_H_
