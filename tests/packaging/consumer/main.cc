#include <bulwark/circuit_breaker.h>
#include <bulwark/version.h>

#include <cstdio>
#include <cstring>

int main() {
  bulwark::CircuitBreaker breaker({.name = "consumer", .consecutive_failures = 1});
  breaker.try_acquire()->record_failure();
  std::printf("bulwark %s: state after one failure: %s\n", bulwark::version(),
              std::string(to_string(breaker.state())).c_str());
  if (std::strcmp(bulwark::version(), BULWARK_VERSION_STRING) != 0) return 1;
  return breaker.state() == bulwark::State::open ? 0 : 1;
}
