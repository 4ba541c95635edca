// A fleet's shared surroundings in virtual time, for tests over MemoryFleetStore: one
// ManualClock for every instance's breakers, a wall clock (Unix ms) for the Fleets and
// the store's leases, moved together. Nothing sleeps.

#ifndef BULWARK_TESTS_REDIS_FLEET_WORLD_H_
#define BULWARK_TESTS_REDIS_FLEET_WORLD_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "bulwark/clock.h"
#include "bulwark/redis/fleet.h"
#include "bulwark/redis/fleet_store.h"

namespace bulwark::redis::testing {

struct World {
  ManualClock clock;
  std::int64_t wall = 1'700'000'000'000;
  MemoryFleetStore store{[this] { return wall; }};
  void advance(std::chrono::milliseconds d) {
    clock.advance(d);
    wall += d.count();
  }
};

// One instance of the service: a breaker shared through its own Fleet over `store`.
template <class Breaker>
struct FleetMember {
  FleetMember(typename Breaker::Config breaker_config, ManualClock& clock, FleetConfig fleet_config,
              FleetStore& store, AttachOptions options = {})
      : breaker(std::move(breaker_config), clock), fleet(std::move(fleet_config), store) {
    fleet.attach(breaker, options);
  }
  // `n` failed calls (those the breaker admits).
  void fail(int n = 3) {
    for (int i = 0; i < n; ++i) {
      if (auto p = breaker.try_acquire()) p->record_failure();
    }
  }
  // One sync, which the test expects to succeed.
  SyncSummary sync() {
    auto s = fleet.sync();
    EXPECT_TRUE(s) << (s ? "" : s.error().message);
    return s ? *s : SyncSummary{};
  }
  FleetKeyReading key() const { return fleet.reading().keys.at(0); }

  Breaker breaker;
  Fleet fleet;
};

}  // namespace bulwark::redis::testing

#endif  // BULWARK_TESTS_REDIS_FLEET_WORLD_H_
