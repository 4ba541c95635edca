#include <bulwark/asio/pipeline.h>

#include <asio.hpp>
#include <cstdio>

struct Error {};

int main() {
  bulwark::CircuitBreaker breaker([] {
    bulwark::BreakerConfig c;
    c.name = "consumer";
    return c;
  }());
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker));
  asio::io_context io;
  int answer = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto r =
            co_await p(bulwark::Context(),
                       []() -> asio::awaitable<bulwark::Expected<int, Error>> { co_return 42; });
        if (r) answer = *r;
      },
      asio::detached);
  io.run();
  std::printf("async pipeline answered %d\n", answer);
  return answer == 42 ? 0 : 1;
}
