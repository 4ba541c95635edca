// The registry's idle sweep (detail/registry_eviction.h): bounded steps and the TTL
// in reference-word units.

#include "bulwark/detail/registry_eviction.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <set>

namespace {

using namespace std::chrono_literals;
using bulwark::detail::IdlePolicy;
using bulwark::detail::SlotTable;
using bulwark::detail::sweep_step;

TEST(IdlePolicy, TtlRoundsUpToUnitsAndStepsComeEveryEighth) {
  const IdlePolicy off(bulwark::Nanos::zero());
  EXPECT_FALSE(off.enabled());
  const IdlePolicy p(std::chrono::duration_cast<bulwark::Nanos>(80s));
  EXPECT_TRUE(p.enabled());
  EXPECT_GE(p.ttl_units << bulwark::detail::RegistryRef::kUnitShift,
            static_cast<std::uint64_t>(bulwark::Nanos(80s).count()));
  EXPECT_EQ(p.interval, bulwark::Nanos(10s).count());
  const IdlePolicy tiny(std::chrono::duration_cast<bulwark::Nanos>(1ms));
  EXPECT_EQ(tiny.interval, bulwark::Ticks{1} << bulwark::detail::RegistryRef::kUnitShift);
}

TEST(IdlePolicy, ChecksTheClockOnceEverySoManyLookups) {
  int checks = 0;
  for (std::uint32_t i = 0; i < 10 * IdlePolicy::kLookupsPerCheck; ++i)
    checks += IdlePolicy::check_now();
  EXPECT_EQ(checks, 10);
}

TEST(SweepStep, VisitsAtMostTheBudgetAndMovesTheCursor) {
  SlotTable t;
  for (std::uint32_t i = 0; i < 100; ++i) t.insert(i * 2654435761u, i);
  std::size_t cursor = 0;
  std::set<std::uint32_t> seen;
  EXPECT_EQ(sweep_step(t, cursor, 10,
                       [&](std::uint32_t index, std::size_t) {
                         seen.insert(index);
                         return false;
                       }),
            0u);
  EXPECT_EQ(cursor, 10u);
  EXPECT_LE(seen.size(), 10u);
}

TEST(SweepStep, EvictsAtMostTheBudgetAndLooksAgainAtAnErasedSlot) {
  SlotTable t;
  for (std::uint32_t i = 0; i < 100; ++i) t.insert(i * 2654435761u, i);
  std::size_t cursor = 0;
  std::size_t visits = 0;
  const std::size_t evicted = sweep_step(t, cursor, 8, [&](std::uint32_t, std::size_t pos) {
    ++visits;
    t.erase(pos);  // what the registry's retire() does
    return true;
  });
  EXPECT_GT(evicted, 0u);
  EXPECT_LE(evicted, 8u);
  EXPECT_EQ(t.size(), 100u - evicted);
  EXPECT_LE(visits, 16u);
  // Over enough steps every entry is visited.
  while (t.size() > 0) {
    (void)sweep_step(t, cursor, 8, [&](std::uint32_t, std::size_t pos) {
      t.erase(pos);
      return true;
    });
  }
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
