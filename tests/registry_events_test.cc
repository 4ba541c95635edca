// How a registry's events find their entry (detail/registry_events.h): a breaker
// address maps to its entry through the page directory; any other address does not.

#include "bulwark/detail/registry_events.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using bulwark::detail::kArenaPage;
using bulwark::detail::SegmentedArray;

struct alignas(64) FakeEntry {
  unsigned char bytes[192];  // not a power of two: offsets must still line up
};

TEST(KeyedEvents, EveryEntryAddressLeadsToItsEntryAndNothingElseDoes) {
  bulwark::detail::KeyedEvents<FakeEntry> events;
  SegmentedArray<FakeEntry, kArenaPage> arena;
  for (std::uint32_t i = 0; i < 5000; ++i) {
    (void)arena.reserve(i, [&](void* base, std::size_t bytes, std::size_t k) {
      events.directory.add(base, bytes, k);
    });
  }
  for (std::uint32_t i = 0; i < 5000; ++i) {
    FakeEntry* e = arena.at(i);
    ASSERT_EQ(events.owner_of(e), e) << i;
    EXPECT_EQ(events.owner_of(reinterpret_cast<unsigned char*>(e) + 64), nullptr) << i;
  }
  FakeEntry stranger{};
  EXPECT_EQ(events.owner_of(&stranger), nullptr);
  std::vector<FakeEntry> heap(3);
  EXPECT_EQ(events.owner_of(&heap[1]), nullptr);
}

TEST(KeyedEvents, AnAddressPastTheLastEntryOfAPaddedSegmentIsNotAnEntry) {
  bulwark::detail::KeyedEvents<FakeEntry> events;
  SegmentedArray<FakeEntry, kArenaPage> arena;
  (void)arena.reserve(0, [&](void* base, std::size_t bytes, std::size_t k) {
    events.directory.add(base, bytes, k);
  });
  // Segment 0 holds 8 entries (1536 bytes) in one 4 KiB page: the rest is padding.
  const auto* base = reinterpret_cast<unsigned char*>(arena.at(0));
  EXPECT_EQ(events.owner_of(base + 7 * sizeof(FakeEntry)), arena.at(7));
  EXPECT_EQ(events.owner_of(base + 8 * sizeof(FakeEntry)), nullptr);
}

}  // namespace
