// The registry entry's reference word (detail/registry_ref.h): pins, kills and the
// CLOCK verdicts an eviction step makes on it.

#include "bulwark/detail/registry_ref.h"

#include <gtest/gtest.h>

namespace {

using bulwark::detail::RegistryRef;
using Verdict = RegistryRef::Verdict;

TEST(RegistryRef, StartsDeadAndCannotBePinned) {
  RegistryRef r;
  EXPECT_TRUE(r.dead());
  EXPECT_FALSE(r.pin(true));
  std::uint64_t w = 0;
  EXPECT_EQ(r.examine(100, 10, w), Verdict::gone);
}

TEST(RegistryRef, PinCountsAndMarksUse) {
  RegistryRef r;
  r.publish(0, 5);
  EXPECT_FALSE(r.dead());
  EXPECT_EQ(r.idle_since(), 5u);
  ASSERT_TRUE(r.pin(true));
  ASSERT_TRUE(r.pin(false));
  EXPECT_EQ(r.refs(), 2u);
  EXPECT_TRUE(RegistryRef::Used::get(r.word.load()));
  r.retain();
  EXPECT_EQ(r.refs(), 3u);
  r.release();
  r.release();
  r.release();
  EXPECT_EQ(r.refs(), 0u);
  EXPECT_EQ(r.idle_since(), 5u);  // pinning never touches the idle time
}

TEST(RegistryRef, AWalkDoesNotCountAsUse) {
  RegistryRef r;
  r.publish(0, 0);
  ASSERT_TRUE(r.pin(false));
  r.release();
  EXPECT_FALSE(RegistryRef::Used::get(r.word.load()));
}

TEST(RegistryRef, UsedOrReferencedGetsASecondChanceThatRestartsTheIdleTime) {
  RegistryRef r;
  r.publish(0, 0);
  ASSERT_TRUE(r.pin(true));
  r.release();
  std::uint64_t w = 0;
  EXPECT_EQ(r.examine(1000, 10, w), Verdict::busy);  // used: clears the bit, idle since 1000
  EXPECT_EQ(r.idle_since(), 1000u);
  EXPECT_FALSE(RegistryRef::Used::get(r.word.load()));
  EXPECT_EQ(r.examine(1010, 10, w), Verdict::young);  // 10 units: not more than the ttl yet
  EXPECT_EQ(r.examine(1011, 10, w), Verdict::idle);
  ASSERT_TRUE(r.pin(false));  // referenced now
  EXPECT_EQ(r.examine(2000, 10, w), Verdict::busy);
  r.release();
}

TEST(RegistryRef, KillSucceedsOnlyUnreferencedAndThenPinsFail) {
  RegistryRef r;
  r.publish(1, 0);  // published with its creator's reference
  std::uint64_t w = r.word.load();
  EXPECT_FALSE(r.kill(w));
  r.release();
  w = r.word.load();
  ASSERT_TRUE(r.kill(w));
  EXPECT_TRUE(r.dead());
  EXPECT_FALSE(r.pin(true));
  r.revive(w);
  EXPECT_FALSE(r.dead());
  EXPECT_TRUE(r.pin(true));
  r.release();
}

TEST(RegistryRef, KillLosesToAPinThatCameFirst) {
  RegistryRef r;
  r.publish(0, 0);
  const std::uint64_t seen = r.word.load();
  ASSERT_TRUE(r.pin(true));
  EXPECT_FALSE(r.kill(seen));  // the word changed under it
  EXPECT_FALSE(r.dead());
  r.release();
}

TEST(RegistryRef, IdleTimeWrapsWithTheField) {
  constexpr std::uint64_t max = RegistryRef::IdleSince::max;
  EXPECT_EQ(RegistryRef::elapsed(max, 2), 3u);
  EXPECT_EQ(RegistryRef::units(bulwark::Ticks{3} << RegistryRef::kUnitShift), 3u);
}

}  // namespace
