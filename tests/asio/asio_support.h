// What the asio tests share: an upstream server on 127.0.0.1 that answers, fails,
// answers late or never answers; a client call over a real socket that honours Asio
// cancellation; and a driver that runs an io_context in virtual time.
//
// The upstream speaks one line each way: the client sends "GET\n"; the server answers
// "OK <n>\n" (n counts the requests it answered) or "FAIL\n", after a delay on the
// server's own timer (virtual time with a ManualClock), or never. It then reads until
// the client closes, and counts the connection closed: a test sees every socket the
// client opened being closed.

#ifndef BULWARK_TESTS_ASIO_SUPPORT_H_
#define BULWARK_TESTS_ASIO_SUPPORT_H_

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "asio/support/notice_time.h"
#include "bulwark/asio/timer.h"
#include "bulwark/context.h"
#include "bulwark/expected.h"
#include "bulwark/outcome.h"

namespace bulwark::testing {

using ::asio::ip::tcp;

// The call's own error: a network error (operation_aborted when cancelled) or FAIL.
struct NetError {
  std::error_code code;  // empty for a FAIL answer
  bool ignored = false;  // a 4xx-like answer: the caller's own fault
  bulwark::Outcome outcome() const {
    return ignored ? bulwark::Outcome::ignored : bulwark::Outcome::failure;
  }
};

// mixed: request n (from 0) fails if n % 4 == 1, answers after `delay` x 100 if
// n % 8 == 3, else after `delay`.
enum class Mode { ok, fail, reject, never, mixed };

// The upstream. C is the clock its answer delay runs on.
template <class C>
class Upstream {
 public:
  explicit Upstream(::asio::any_io_executor ex)
      : ex_(ex), acceptor_(ex, tcp::endpoint(::asio::ip::address_v4::loopback(), 0)) {
    ::asio::co_spawn(ex_, accept_loop(), ::asio::detached);
  }
  ~Upstream() { stop(); }
  void stop() {
    std::error_code ignored;
    acceptor_.close(ignored);
  }

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  tcp::endpoint endpoint() const { return {::asio::ip::address_v4::loopback(), port()}; }

  // What the next connections get, and after how long.
  void set(Mode mode, Nanos delay = Nanos::zero()) {
    mode_.store(mode);
    delay_.store(delay.count());
  }
  // Answers `n` requests with FAIL, then goes back to `after`.
  void fail_next(int n) { fail_next_.store(n); }

  int accepted() const { return accepted_.load(); }
  int closed() const { return closed_.load(); }
  int answered() const { return answered_.load(); }
  int open() const { return accepted() - closed(); }

 private:
  ::asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] =
          co_await acceptor_.async_accept(::asio::experimental::as_tuple(::asio::use_awaitable));
      if (ec) co_return;
      accepted_.fetch_add(1);
      // A strand each: the upstream may run on a multi-threaded io_context.
      ::asio::co_spawn(::asio::make_strand(ex_), serve(std::move(socket)), ::asio::detached);
    }
  }

  ::asio::awaitable<void> serve(tcp::socket socket) {
    std::string line;
    auto [ec, n] =
        co_await ::asio::async_read_until(socket, ::asio::dynamic_buffer(line), '\n',
                                          ::asio::experimental::as_tuple(::asio::use_awaitable));
    if (!ec) {
      Mode mode = fail_next_.fetch_sub(1) > 0 ? Mode::fail : mode_.load();
      Nanos delay(delay_.load());
      if (mode == Mode::mixed) {
        const int nth = requests_.fetch_add(1);
        mode = nth % 4 == 1 ? Mode::fail : Mode::ok;
        if (nth % 8 == 3) delay *= 100;
      }
      if (mode != Mode::never) {
        if (delay > Nanos::zero()) {
          bulwark::asio::Timer<C> t(co_await ::asio::this_coro::executor);
          t.expires_after(delay);
          co_await t.async_wait(::asio::experimental::as_tuple(::asio::use_awaitable));
        }
        std::string answer = mode == Mode::ok       ? "OK " + std::to_string(++answered_) + "\n"
                             : mode == Mode::reject ? std::string("REJECT\n")
                                                    : std::string("FAIL\n");
        co_await ::asio::async_write(socket, ::asio::buffer(answer),
                                     ::asio::experimental::as_tuple(::asio::use_awaitable));
      }
      // Wait for the client to close (a never-answering upstream waits here too).
      char sink[64];
      for (;;) {
        auto [rec, got] = co_await socket.async_read_some(
            ::asio::buffer(sink), ::asio::experimental::as_tuple(::asio::use_awaitable));
        if (rec) break;
      }
    }
    closed_.fetch_add(1);
  }

  ::asio::any_io_executor ex_;
  tcp::acceptor acceptor_;
  std::atomic<Mode> mode_{Mode::ok};
  std::atomic<Nanos::rep> delay_{0};
  std::atomic<int> fail_next_{0};
  std::atomic<int> accepted_{0};
  std::atomic<int> closed_{0};
  std::atomic<int> answered_{0};
  std::atomic<int> requests_{0};
};

// The client call: connect, send GET, read one line. Every operation uses the
// coroutine's cancellation slot (use_awaitable), so a cancelled attempt aborts them;
// errors come back as values (as_tuple), so an aborted operation is a NetError.
template <class C>
::asio::awaitable<bulwark::Expected<std::string, NetError>> fetch(tcp::endpoint at,
                                                                  const BasicContext<C>&) {
  tcp::socket socket(co_await ::asio::this_coro::executor);
  auto [cec] =
      co_await socket.async_connect(at, ::asio::experimental::as_tuple(::asio::use_awaitable));
  if (cec) co_return bulwark::Unexpected(NetError{cec});
  const std::string get = "GET\n";
  auto [wec, w] = co_await ::asio::async_write(
      socket, ::asio::buffer(get), ::asio::experimental::as_tuple(::asio::use_awaitable));
  if (wec) co_return bulwark::Unexpected(NetError{wec});
  std::string line;
  auto [rec, n] =
      co_await ::asio::async_read_until(socket, ::asio::dynamic_buffer(line), '\n',
                                        ::asio::experimental::as_tuple(::asio::use_awaitable));
  if (rec) co_return bulwark::Unexpected(NetError{rec});
  if (line.rfind("OK ", 0) == 0) co_return line.substr(3, line.size() - 4);
  co_return bulwark::Unexpected(NetError{{}, line == "REJECT\n"});
}

// Runs `io` in virtual time until `done()` or `limit` of virtual time has passed:
// poll until nothing is ready, then move the clock by `step`. Returns whether done.
template <class Done>
bool drive(::asio::io_context& io, ManualClock& clock, Done&& done,
           Nanos limit = std::chrono::seconds(120), Nanos step = std::chrono::milliseconds(1)) {
  const Ticks until = saturating_add(now_ticks(clock), limit.count());
  for (;;) {
    // Twice empty in a row: loopback I/O that was in flight has been seen.
    int empty = 0;
    while (empty < 2) {
      if (io.stopped()) io.restart();
      empty = io.poll() == 0 ? empty + 1 : 0;
    }
    if (done()) return true;
    if (now_ticks(clock) >= until) return false;
    clock.advance(step);
    notice_time(io);
  }
}

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_ASIO_SUPPORT_H_
