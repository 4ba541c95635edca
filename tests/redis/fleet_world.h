// A fleet's shared surroundings in virtual time, for tests over MemoryFleetStore: one
// ManualClock for every instance's breakers, a wall clock (Unix ms) for the Fleets and
// the store's leases, moved together. Nothing sleeps.

#ifndef BULWARK_TESTS_REDIS_FLEET_WORLD_H_
#define BULWARK_TESTS_REDIS_FLEET_WORLD_H_

#include <chrono>
#include <cstdint>

#include "bulwark/clock.h"
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

}  // namespace bulwark::redis::testing

#endif  // BULWARK_TESTS_REDIS_FLEET_WORLD_H_
