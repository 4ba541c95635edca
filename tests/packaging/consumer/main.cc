#include <bulwark/circuit_breaker.h>

#include <cstdio>

int main() {
  bulwark::CircuitBreaker breaker({.name = "consumer", .consecutive_failures = 1});
  breaker.try_acquire()->record_failure();
  std::printf("state after one failure: %s\n", std::string(to_string(breaker.state())).c_str());
  return breaker.state() == bulwark::State::open ? 0 : 1;
}
