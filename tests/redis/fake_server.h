// A TCP server of the test's own on a free 127.0.0.1 port that answers whatever it is
// sent with what the test tells it to, for what a real redis-server will not do: a
// reply trickled a byte at a time, half a reply and then silence, two replies for one
// request. One connection at a time, on a thread of its own, stopped (and joined) by the
// destructor.

#ifndef BULWARK_TESTS_REDIS_FAKE_SERVER_H_
#define BULWARK_TESTS_REDIS_FAKE_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace bulwark::testing {

class FakeServer {
 public:
  // How to answer one connection: called on the server's thread with a connected socket
  // (closed afterwards) and `running`, which turns false when the server stops.
  using Handler = std::function<void(int fd, const std::atomic<bool>& running)>;

  explicit FakeServer(Handler handler) : handler_(std::move(handler)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(listen_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_, 8);
    socklen_t len = sizeof addr;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;
  ~FakeServer() {
    running_ = false;
    thread_.join();
    ::close(listen_);
  }

  int port() const { return port_; }
  int connections() const { return connections_.load(); }

  // Handler helpers. Reads what is there (waiting up to `wait` for the first byte).
  static std::string read_some(int fd, std::chrono::milliseconds wait) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return {};
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }
  // Reads until `text` has been received (or the peer or the server stops).
  static bool read_until(int fd, const std::string& text, const std::atomic<bool>& running) {
    std::string got;
    while (running.load() && got.find(text) == std::string::npos) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return false;
      got.append(buf, static_cast<std::size_t>(n));
    }
    return got.find(text) != std::string::npos;
  }
  static bool send_all(int fd, const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Sends `bytes` one at a time, `gap` apart, then keeps sending `filler` a byte at a
  // time until the peer goes or the server stops.
  static void trickle(int fd, const std::string& bytes, char filler, std::chrono::milliseconds gap,
                      const std::atomic<bool>& running) {
    std::size_t i = 0;
    while (running.load()) {
      const char c = i < bytes.size() ? bytes[i] : filler;
      ++i;
      if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(gap);
    }
  }
  // Waits until the peer closes the connection (or the server stops).
  static void until_closed(int fd, const std::atomic<bool>& running) {
    while (running.load()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      char buf[4096];
      if (::recv(fd, buf, sizeof buf, 0) <= 0) return;
    }
  }

 private:
  void serve() {
    while (running_.load()) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_, nullptr, nullptr);
      if (fd < 0) continue;
      connections_.fetch_add(1);
      handler_(fd, running_);
      ::close(fd);
    }
  }

  Handler handler_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> running_{true};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_REDIS_FAKE_SERVER_H_
