// Per-thread ledgers (include/bulwark/detail/ledger.h): registration, moving a cell,
// folding and forgetting. None of this is on a call's common path.

#include "bulwark/detail/ledger.h"

#include <new>
#include <thread>

namespace bulwark::detail {

constinit thread_local LedgerCell* tls_ledger = nullptr;

namespace {

// A cell's owner while its thread moves the counts out.
Totals busy_sentinel;
Totals* const kBusy = &busy_sentinel;

// A breaker whose set is full takes its home cell after this many misses of that cell.
constexpr std::uint32_t kMissesBeforeMove = 64;

struct alignas(64) Table {  // line-aligned: no cell shares a line with another thread's
  LedgerCell cells[kLedgerCells];
  std::atomic<bool> in_use{true};
  Table* next = nullptr;  // set before the table is published, never changed
};

// Every table ever made, newest first. Tables are never freed: a thread's exit leaves
// its table (every cell free) for the next thread to register, so readers walk the
// list without a lock and the list is as long as the most threads ever counting at once.
constinit std::atomic<Table*> g_tables{nullptr};

// Set once this thread's table is folded away at its exit: its later counts (from
// other thread_local destructors) go straight to the base counters.
constinit thread_local bool tls_exited = false;

void add_to_base(Totals& t, Total which) noexcept {
  t.base[static_cast<std::size_t>(which)].fetch_add(1, std::memory_order_relaxed);
}

// Moves in progress and done, so that a fold can tell it saw none: a count moving from
// a cell to the base counters could otherwise be missed or seen twice, and a total
// read twice could go down (Prometheus would take that for a restart). Moves are rare
// (a thread's exit, or a cell changing hands after kMissesBeforeMove misses).
struct alignas(64) MoveCount {
  std::atomic<std::uint64_t> n{0};
};
constinit MoveCount g_moves_started;
constinit MoveCount g_moves_finished;

// Moves cell `c`'s counts (owned by `old`) into old's base counters and gives the cell
// to `next` (null: free). Only the cell's thread calls it.
void move_cell(LedgerCell& c, Totals* old, Totals* next) noexcept {
  // Acquire: the moves below are not seen before the start is (see ledger_fold).
  g_moves_started.n.fetch_add(1, std::memory_order_acq_rel);
  if (c.owner.compare_exchange_strong(old, kBusy, std::memory_order_acq_rel)) {
    for (std::size_t i = 0; i < kTotals; ++i) {
      const std::uint64_t v = c.n[i].load(std::memory_order_relaxed);
      if (v != 0) old->base[i].fetch_add(v, std::memory_order_relaxed);
    }
  }
  // Otherwise the owner was being destroyed and took the cell back (it is null now):
  // its counts are dropped with it.
  for (auto& n : c.n) n.store(0, std::memory_order_relaxed);
  c.misses = 0;
  c.owner.store(next, std::memory_order_release);
  g_moves_finished.n.fetch_add(1, std::memory_order_release);
}

// Folds this thread's table into the base counters when the thread exits.
struct TableOwner {
  Table* table = nullptr;
  ~TableOwner() {
    if (table == nullptr) return;
    for (LedgerCell& c : table->cells) {
      if (Totals* o = c.owner.load(std::memory_order_relaxed)) move_cell(c, o, nullptr);
    }
    tls_ledger = nullptr;
    tls_exited = true;
    table->in_use.store(false, std::memory_order_release);
  }
};
thread_local TableOwner tls_owner;

LedgerCell* register_thread() noexcept {
  Table* table = nullptr;
  for (Table* t = g_tables.load(std::memory_order_acquire); t != nullptr; t = t->next) {
    bool free = false;
    if (!t->in_use.load(std::memory_order_relaxed) &&
        t->in_use.compare_exchange_strong(free, true, std::memory_order_acquire)) {
      table = t;
      break;
    }
  }
  if (table == nullptr) {
    table = new (std::nothrow) Table;
    if (table == nullptr) return nullptr;
    Table* head = g_tables.load(std::memory_order_relaxed);
    do {
      table->next = head;
    } while (!g_tables.compare_exchange_weak(head, table, std::memory_order_release,
                                             std::memory_order_relaxed));
  }
  tls_owner.table = table;
  tls_ledger = table->cells;
  return table->cells;
}

}  // namespace

bool ledger_add_slow(Totals& t, Total which) noexcept {
  LedgerCell* cells = tls_ledger;
  if (cells == nullptr && !tls_exited) cells = register_thread();
  if (cells == nullptr) {  // the thread is exiting, or its table could not be allocated
    add_to_base(t, which);
    return false;
  }
  const std::size_t slot = ledger_slot(&t);
  if (LedgerCell* c = ledger_find(cells, t, slot)) {  // the thread has just registered
    auto& n = c->n[static_cast<std::size_t>(which)];
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }
  // A free cell of the set, the home one first; else the home cell once `t` has missed
  // it often enough.
  LedgerCell& home = cells[slot];
  LedgerCell* c = &home;
  Totals* o = home.owner.load(std::memory_order_relaxed);
  for (std::size_t w = 0; w < kLedgerWays && o != nullptr; ++w) {
    LedgerCell& other = cells[ledger_set(slot) + w];
    if (other.owner.load(std::memory_order_relaxed) == nullptr) c = &other, o = nullptr;
  }
  if (o != nullptr && ++home.misses < kMissesBeforeMove) {
    add_to_base(t, which);
    return false;
  }
  if (o != nullptr) {
    move_cell(*c, o, &t);
  } else {
    for (auto& n : c->n) n.store(0, std::memory_order_relaxed);
    c->misses = 0;
    c->owner.store(&t, std::memory_order_release);
  }
  c->n[static_cast<std::size_t>(which)].store(1, std::memory_order_relaxed);
  return true;
}

std::array<std::uint64_t, kTotals> ledger_fold(const Totals& t) noexcept {
  const std::size_t slot = ledger_slot(&t);
  for (;;) {
    const std::uint64_t started = g_moves_started.n.load(std::memory_order_acquire);
    if (g_moves_finished.n.load(std::memory_order_acquire) != started) {
      std::this_thread::yield();  // a move in progress: a few stores
      continue;
    }
    std::array<std::uint64_t, kTotals> sum{};
    for (std::size_t i = 0; i < kTotals; ++i) sum[i] = t.base[i].load(std::memory_order_relaxed);
    for (Table* table = g_tables.load(std::memory_order_acquire); table != nullptr;
         table = table->next) {
      for (std::size_t w = 0; w < kLedgerWays; ++w) {  // t holds at most one cell of its set
        const LedgerCell& c = table->cells[ledger_set(slot) + w];
        if (c.owner.load(std::memory_order_acquire) != &t) continue;
        for (std::size_t i = 0; i < kTotals; ++i) sum[i] += c.n[i].load(std::memory_order_relaxed);
      }
    }
    // A read-modify-write reads the latest start. If a move started after the first
    // read, this sees it; if not, its start reads this write (release/acquire), so
    // none of its stores were seen above. (No fences: ThreadSanitizer does not take them.)
    if (g_moves_started.n.fetch_add(0, std::memory_order_acq_rel) == started) return sum;
  }
}

void ledger_forget(const Totals& t) noexcept {
  Totals* const self = const_cast<Totals*>(&t);
  const std::size_t slot = ledger_slot(&t);
  for (Table* table = g_tables.load(std::memory_order_acquire); table != nullptr;
       table = table->next) {
    for (std::size_t w = 0; w < kLedgerWays; ++w) {
      LedgerCell& c = table->cells[ledger_set(slot) + w];
      for (;;) {
        Totals* o = c.owner.load(std::memory_order_acquire);
        if (o == kBusy) {  // its thread is moving counts out of the cell: a few stores
          std::this_thread::yield();
          continue;
        }
        if (o != self || c.owner.compare_exchange_strong(o, nullptr, std::memory_order_acq_rel))
          break;
      }
    }
  }
}

void ledger_join() noexcept {
  if (tls_ledger == nullptr && !tls_exited) (void)register_thread();
}

std::size_t ledger_tables() noexcept {
  std::size_t n = 0;
  for (Table* t = g_tables.load(std::memory_order_acquire); t != nullptr; t = t->next) ++n;
  return n;
}

}  // namespace bulwark::detail
