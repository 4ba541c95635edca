#include <bulwark/redis/fleet.h>
#include <bulwark/redis/redis_store.h>

#include <cstdio>

int main() {
  bulwark::CircuitBreaker breaker({.name = "consumer", .consecutive_failures = 1});
  bulwark::redis::MemoryFleetStore store;
  bulwark::redis::Fleet fleet({.instance = "consumer"}, store);
  fleet.attach(breaker);
  breaker.try_acquire()->record_failure();
  // Links hiredis too: a store that is never asked to connect.
  bulwark::redis::RedisFleetStore redis({.port = 1});
  const bool ok = fleet.sync().has_value() && !redis.connected();
  std::printf("fleet: %s\n", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}
