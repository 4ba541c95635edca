// The per-thread ledgers (detail/ledger.h) on real threads, run under TSan in CI:
// totals exact at rest whichever threads counted them and whether they still live,
// never going down while cells change hands, a dying breaker's cells taken back (a
// breaker built at its address starts from zero), and exited threads' tables reused.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bulwark/detail/ledger.h"

namespace bulwark::detail {
namespace {

constexpr std::size_t kS = static_cast<std::size_t>(Total::successes);
constexpr std::size_t kR = static_cast<std::size_t>(Total::rejected);

// Totals laid out as a breaker's are: one per cache line.
struct alignas(64) Line {
  Totals totals;
};

// Lines whose totals have the same home cell in every table: `a` and `b`, and as many
// more as a set has cells, which fill_set() counts once in the calling thread so that
// the set is full there: a and b then miss, and the home cell changes hands.
struct Colliding {
  std::vector<std::unique_ptr<Line>> pool;
  Line* a = nullptr;
  Line* b = nullptr;
  std::array<Line*, kLedgerWays> fillers{};
  Colliding() {
    std::unordered_map<std::size_t, std::vector<Line*>> by_slot;
    for (int i = 0; i < (1 << 17) && b == nullptr; ++i) {
      pool.push_back(std::make_unique<Line>());
      auto& same = by_slot[ledger_slot(&pool.back()->totals)];
      same.push_back(pool.back().get());
      if (same.size() == kLedgerWays + 2) {
        std::copy_n(same.begin(), kLedgerWays, fillers.begin());
        a = same[kLedgerWays], b = same[kLedgerWays + 1];
      }
    }
  }
  void fill_set() const {
    for (Line* f : fillers) ledger_add(f->totals, Total::ignored);
  }
  ~Colliding() {
    for (Line* f : fillers) {
      if (f != nullptr) ledger_forget(f->totals);
    }
  }
};

// A gate the test opens once: threads that counted wait at it, alive, while the
// totals are read.
class Gate {
 public:
  void wait() const {
    while (!open_.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  void open() { open_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> open_{false};
};

TEST(LedgerStress, TotalsAreExactAtRestFromLiveAndExitedThreads) {
  Line line;
  constexpr int kThreads = 4, kCalls = 20'000;
  Gate gate;
  std::atomic<int> counted{0};
  std::vector<std::thread> live;
  for (int id = 0; id < kThreads; ++id) {
    live.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        ledger_add(line.totals, i % 10 == 0 ? Total::rejected : Total::successes);
      }
      counted.fetch_add(1, std::memory_order_release);
      gate.wait();  // alive, its cells still holding its counts
    });
  }
  while (counted.load(std::memory_order_acquire) < kThreads) std::this_thread::yield();
  auto sum = ledger_fold(line.totals);
  EXPECT_EQ(sum[kS], std::uint64_t{kThreads} * kCalls * 9 / 10) << "threads alive";
  EXPECT_EQ(sum[kR], std::uint64_t{kThreads} * kCalls / 10) << "threads alive";
  gate.open();
  for (auto& t : live) t.join();
  sum = ledger_fold(line.totals);
  EXPECT_EQ(sum[kS], std::uint64_t{kThreads} * kCalls * 9 / 10) << "threads exited";
  EXPECT_EQ(sum[kR], std::uint64_t{kThreads} * kCalls / 10) << "threads exited";
  ledger_forget(line.totals);
}

TEST(LedgerStress, TotalsNeverGoDownWhileCellsChangeHands) {
  Colliding c;
  ASSERT_NE(c.b, nullptr) << "too few lines share a home cell";
  constexpr int kThreads = 3, kRounds = 40, kCalls = 300;
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread watcher([&] {
    std::array<std::uint64_t, kTotals> prev_a{}, prev_b{};
    while (!done.load(std::memory_order_acquire)) {
      const auto a = ledger_fold(c.a->totals), b = ledger_fold(c.b->totals);
      if (a[kS] < prev_a[kS] || b[kS] < prev_b[kS]) bad.fetch_add(1);
      prev_a = a, prev_b = b;
    }
  });
  // Threads come and go (tables reused), and alternate between two colliding totals
  // in runs longer than the misses a cell waits for, so cells keep changing hands.
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::thread> threads;
    for (int id = 0; id < kThreads; ++id) {
      threads.emplace_back([&, id] {
        c.fill_set();
        for (int i = 0; i < kCalls; ++i) {
          ledger_add(((i / 100 + id) % 2 == 0 ? c.a : c.b)->totals, Total::successes);
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  done.store(true, std::memory_order_release);
  watcher.join();
  EXPECT_EQ(bad.load(), 0) << "a total went down between two reads";
  const std::uint64_t all = std::uint64_t{kRounds} * kThreads * kCalls;
  EXPECT_EQ(ledger_fold(c.a->totals)[kS] + ledger_fold(c.b->totals)[kS], all);
  ledger_forget(c.a->totals);
  ledger_forget(c.b->totals);
}

TEST(LedgerStress, AThreadThatKeepsMissingACellTakesIt) {
  Colliding c;
  ASSERT_NE(c.b, nullptr) << "too few lines share a home cell";
  std::thread([&] {
    Line* const f = c.fillers[0];
    ledger_add(f->totals, Total::successes);  // f takes the home cell
    for (std::size_t i = 1; i + 1 < kLedgerWays; ++i)
      ledger_add(c.fillers[i]->totals, Total::ignored);
    ledger_add(c.a->totals, Total::successes);  // a the set's last free cell
    for (int i = 0; i < 1000; ++i) ledger_add(c.b->totals, Total::successes);
    // b counted through the base counters until it took the home cell, then in it.
    const std::size_t home = ledger_slot(&c.b->totals);
    EXPECT_EQ(tls_ledger[home].owner.load(), &c.b->totals);
    EXPECT_NE(ledger_find(tls_ledger, c.a->totals, home), nullptr) << "a kept its cell";
    EXPECT_LT(c.b->totals.base[kS].load(), 1000u);
    EXPECT_EQ(f->totals.base[kS].load(), 1u) << "f's count moved to its base";
    EXPECT_EQ(c.a->totals.base[kS].load(), 0u);
    EXPECT_EQ(ledger_fold(f->totals)[kS], 1u);
    EXPECT_EQ(ledger_fold(c.a->totals)[kS], 1u);
    EXPECT_EQ(ledger_fold(c.b->totals)[kS], 1000u);
  }).join();
  ledger_forget(c.a->totals);
  ledger_forget(c.b->totals);
}

TEST(LedgerStress, AForgottenBreakersCellsGoBackAndItsAddressStartsFromZero) {
  alignas(Line) unsigned char storage[sizeof(Line)];
  Line* line = new (storage) Line;
  Gate gate, reuse;
  std::atomic<int> counted{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 3; ++id) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) ledger_add(line->totals, Total::successes);
      counted.fetch_add(1, std::memory_order_release);
      gate.wait();
      // The new breaker at the same address: counted from zero, in this thread's cell.
      for (int i = 0; i < 7; ++i) ledger_add(line->totals, Total::failures);
      counted.fetch_add(1, std::memory_order_release);
      reuse.wait();
    });
  }
  while (counted.load(std::memory_order_acquire) < 3) std::this_thread::yield();
  EXPECT_EQ(ledger_fold(line->totals)[kS], 1500u);
  ledger_forget(line->totals);
  line->~Line();
  line = new (storage) Line;
  EXPECT_EQ(ledger_fold(line->totals)[kS], 0u) << "the old breaker's counts leaked to the new";
  gate.open();
  while (counted.load(std::memory_order_acquire) < 6) std::this_thread::yield();
  const auto sum = ledger_fold(line->totals);
  EXPECT_EQ(sum[kS], 0u);
  EXPECT_EQ(sum[static_cast<std::size_t>(Total::failures)], 21u);
  reuse.open();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ledger_fold(line->totals)[static_cast<std::size_t>(Total::failures)], 21u);
  ledger_forget(line->totals);
  line->~Line();
}

TEST(LedgerStress, ForgettingWhileItsThreadMovesTheCellNeitherLosesNorTouchesItAfter) {
  // A thread done with breaker X goes on with Y, which shares X's cell, and so moves
  // X's counts out of its cell while X is being destroyed (as a registry evicting an
  // idle key would). Once ledger_forget(X) returns, nothing may touch X: its storage
  // is scribbled over and rebuilt each round (ASan and TSan would see an access).
  Colliding c;
  ASSERT_NE(c.b, nullptr) << "too few lines share a home cell";
  Line* const x = c.a;
  Line* const y = c.b;
  constexpr int kRounds = 300;
  std::atomic<int> done_with_x{-1};
  std::atomic<int> x_ready{0};
  std::thread worker([&] {
    c.fill_set();
    for (int round = 0; round < kRounds; ++round) {
      while (x_ready.load(std::memory_order_acquire) <= round) std::this_thread::yield();
      for (int i = 0; i < 10; ++i) ledger_add(x->totals, Total::successes);
      done_with_x.store(round, std::memory_order_release);
      for (int i = 0; i < 80; ++i) ledger_add(y->totals, Total::successes);
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    x_ready.store(round + 1, std::memory_order_release);
    while (done_with_x.load(std::memory_order_acquire) < round) std::this_thread::yield();
    ledger_forget(x->totals);
    x->~Line();
    std::memset(static_cast<void*>(x), 0xA5, sizeof(Line));
    new (x) Line;
  }
  worker.join();
  EXPECT_EQ(ledger_fold(x->totals)[kS], 0u) << "a forgotten breaker's counts reached its successor";
  EXPECT_EQ(ledger_fold(y->totals)[kS], std::uint64_t{kRounds} * 80);
  ledger_forget(x->totals);
  ledger_forget(y->totals);
}

TEST(LedgerStress, ExitedThreadsTablesAreReused) {
  Line line;
  std::thread([&] { ledger_add(line.totals, Total::successes); }).join();
  const std::size_t tables = ledger_tables();
  for (int i = 0; i < 50; ++i) {
    std::thread([&] { ledger_add(line.totals, Total::successes); }).join();
  }
  EXPECT_EQ(ledger_tables(), tables) << "each thread made a table of its own";
  EXPECT_EQ(ledger_fold(line.totals)[kS], 51u);
  ledger_forget(line.totals);
}

}  // namespace
}  // namespace bulwark::detail
