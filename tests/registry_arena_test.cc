// The registry's entry storage (detail/registry_arena.h): stable addresses across
// growth, and the page directory that maps an address back to its segment.

#include "bulwark/detail/registry_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace {

using bulwark::detail::kArenaPage;
using bulwark::detail::SegmentDirectory;
using bulwark::detail::SegmentedArray;
using bulwark::detail::Segments;

struct alignas(64) Item {
  unsigned char bytes[128];
};

TEST(Segments, IndicesMapToDoublingSegments) {
  EXPECT_EQ(Segments::of(0), 0u);
  EXPECT_EQ(Segments::of(7), 0u);
  EXPECT_EQ(Segments::of(8), 1u);
  EXPECT_EQ(Segments::of(23), 1u);
  EXPECT_EQ(Segments::of(24), 2u);
  for (std::size_t k = 0; k < 20; ++k) {
    EXPECT_EQ(Segments::of(static_cast<std::uint32_t>(Segments::base(k))), k);
    EXPECT_EQ(Segments::base(k + 1), Segments::base(k) + Segments::size(k));
  }
}

TEST(SegmentedArray, AddressesStayPutAsItGrows) {
  SegmentedArray<Item, kArenaPage> a;
  std::vector<Item*> first;
  std::size_t segments = 0;
  for (std::uint32_t i = 0; i < 5000; ++i) {
    Item* p = a.reserve(i, [&](void* base, std::size_t bytes, std::size_t) {
      ++segments;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % kArenaPage, 0u);
      EXPECT_EQ(bytes % kArenaPage, 0u);
    });
    first.push_back(p);
  }
  EXPECT_EQ(segments, Segments::of(4999) + 1);
  for (std::uint32_t i = 0; i < 5000; ++i) EXPECT_EQ(a.at(i), first[i]) << i;
  EXPECT_EQ(a.at(1) - a.at(0), 1);
}

TEST(SegmentDirectory, FindsTheSegmentOfEveryAddressInsideIt) {
  SegmentedArray<Item, kArenaPage> a;
  SegmentDirectory dir;
  for (std::uint32_t i = 0; i < 3000; ++i) {
    (void)a.reserve(i,
                    [&](void* base, std::size_t bytes, std::size_t k) { dir.add(base, bytes, k); });
  }
  for (std::uint32_t i = 0; i < 3000; i += 7) {
    const Item* p = a.at(i);
    const auto found = dir.find(p);
    const std::size_t k = Segments::of(i);
    ASSERT_EQ(found.base, reinterpret_cast<const unsigned char*>(
                              a.at(static_cast<std::uint32_t>(Segments::base(k)))))
        << i;
    EXPECT_EQ(found.k, k);
    // An address in the middle of an item is in the segment too (the owner checks offsets).
    EXPECT_EQ(dir.find(reinterpret_cast<const unsigned char*>(p) + 5).base, found.base);
  }
  EXPECT_GT(dir.bytes(), 0u);
}

TEST(SegmentDirectory, AnAddressOutsideEverySegmentIsNotFound) {
  SegmentedArray<Item, kArenaPage> a;
  SegmentDirectory dir;
  (void)a.reserve(0,
                  [&](void* base, std::size_t bytes, std::size_t k) { dir.add(base, bytes, k); });
  Item stranger{};
  EXPECT_EQ(dir.find(&stranger).base, nullptr);
  std::vector<Item> heap(4);
  EXPECT_EQ(dir.find(heap.data()).base, nullptr);
}

}  // namespace
