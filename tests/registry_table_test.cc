// The registry shard's index (detail/registry_table.h): probing, growth, and erase
// keeping every other key reachable without tombstones.

#include "bulwark/detail/registry_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using bulwark::detail::SlotTable;

bool has(const SlotTable& t, std::uint32_t tag, std::uint32_t index) {
  return t.probe(tag, [&](std::uint32_t i) { return i == index; });
}

TEST(SlotTable, FindsWhatWasInsertedAndGrowsPastThreeQuarters) {
  SlotTable t;
  EXPECT_EQ(t.capacity(), SlotTable::kInitialSlots);
  for (std::uint32_t i = 0; i < 1000; ++i) t.insert(i * 2654435761u, i);
  EXPECT_EQ(t.size(), 1000u);
  EXPECT_LE(t.size() * 4, t.capacity() * 3);
  for (std::uint32_t i = 0; i < 1000; ++i) EXPECT_TRUE(has(t, i * 2654435761u, i)) << i;
  EXPECT_FALSE(has(t, 12345, 5000));
  // Replaced tables are kept for readers and counted.
  EXPECT_GT(t.bytes(), t.capacity() * sizeof(std::uint64_t));
}

TEST(SlotTable, ProbeVisitsEveryEntryWithTheTagInOrder) {
  SlotTable t;
  t.insert(7, 1);
  t.insert(7, 2);
  t.insert(8, 3);
  std::vector<std::uint32_t> seen;
  EXPECT_FALSE(t.probe(7, [&](std::uint32_t i) {
    seen.push_back(i);
    return false;
  }));
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 2}));
}

TEST(SlotTable, EraseInsideAClusterKeepsTheRestReachable) {
  SlotTable t;
  // Tags with the same home slot in any table size: one long cluster, plus neighbours.
  for (std::uint32_t i = 0; i < 5; ++i) t.insert(64 * i, i);
  t.insert(1, 10);
  t.insert(2, 11);
  std::size_t pos = 0;
  ASSERT_TRUE(t.locate(
      64, [](std::uint32_t i) { return i == 1; }, pos));
  const std::uint64_t before = t.seq();
  t.erase(pos);
  EXPECT_EQ(t.seq(), before + 2);  // odd only while slots moved
  EXPECT_EQ(t.size(), 6u);
  EXPECT_FALSE(has(t, 64, 1));
  for (std::uint32_t i : {0u, 2u, 3u, 4u}) EXPECT_TRUE(has(t, 64 * i, i)) << i;
  EXPECT_TRUE(has(t, 1, 10));
  EXPECT_TRUE(has(t, 2, 11));
}

TEST(SlotTable, EraseEverythingInAnyOrderLeavesItEmpty) {
  SlotTable t;
  for (std::uint32_t i = 0; i < 200; ++i) t.insert(i * 40503u, i);
  for (std::uint32_t i = 0; i < 200; i += 2) {
    std::size_t pos = 0;
    ASSERT_TRUE(t.locate(
        i * 40503u, [&](std::uint32_t x) { return x == i; }, pos));
    t.erase(pos);
  }
  for (std::uint32_t i = 0; i < 200; ++i) EXPECT_EQ(has(t, i * 40503u, i), i % 2 == 1) << i;
  for (std::uint32_t i = 1; i < 200; i += 2) {
    std::size_t pos = 0;
    ASSERT_TRUE(t.locate(
        i * 40503u, [&](std::uint32_t x) { return x == i; }, pos));
    t.erase(pos);
  }
  EXPECT_EQ(t.size(), 0u);
  for (std::size_t i = 0; i < t.capacity(); ++i) EXPECT_EQ(t.at(i), 0u);
}

TEST(SlotTable, SlotsPackTagAndIndex) {
  const std::uint64_t v = SlotTable::slot(0xdeadbeef, 0);
  EXPECT_NE(v, 0u);  // index 0 is still a full slot
  EXPECT_EQ(SlotTable::tag_of(v), 0xdeadbeefu);
  EXPECT_EQ(SlotTable::index_of(v), 0u);
}

}  // namespace
