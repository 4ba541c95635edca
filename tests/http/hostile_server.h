// A hostile HTTP server for tests: raw POSIX sockets on 127.0.0.1, one thread that it
// starts and stops itself, answering each connection with a scripted sequence of
// bytes and behaviours — what a real server library cannot be made to send: garbled
// status lines, malformed headers and framing, resets mid-body, a byte at a time.
//
// It listens on two ports, so that one server plays two hosts (two origins for the
// client's per-host breakers). Connections are served one at a time, in order: the
// script for a connection runs to its end (or until the client goes away) before the
// next one is accepted. Every request it read is recorded, so a test asserts what
// reached it (a header that crossed a redirect, a method that changed).
//
// Waits inside a script (a trickle's pause between bytes, a hold) end early when the
// client closes the connection or the server stops: stopping never waits for a script.

#ifndef BULWARK_TESTS_HTTP_HOSTILE_SERVER_H_
#define BULWARK_TESTS_HTTP_HOSTILE_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace bulwark::testing {

// One request as the server read it.
struct RawRequest {
  int port = 0;  // the port it arrived on
  std::string method;
  std::string target;  // the request-target: "/path?query"
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::optional<std::string> header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n.size() == name.size() &&
          std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) ==
                   std::tolower(static_cast<unsigned char>(b));
          }))
        return v;
    }
    return std::nullopt;
  }
};

// One thing the server does on a connection.
struct Action {
  enum class Kind : std::uint8_t {
    send,     // write `bytes`
    trickle,  // write `bytes` one at a time, `pause` before each
    hold,     // wait until the client closes the connection (or the server stops);
              // further requests on it are recorded, not answered
    reset,    // close with SO_LINGER 0: the client sees a reset (RST)
  };
  Kind kind = Kind::send;
  std::string bytes = {};
  std::chrono::milliseconds pause{0};

  static Action send(std::string b) { return {Kind::send, std::move(b), {}}; }
  static Action trickle(std::string b, std::chrono::milliseconds pause) {
    return {Kind::trickle, std::move(b), pause};
  }
  static Action hold() { return {Kind::hold, {}, {}}; }
  static Action reset() { return {Kind::reset, {}, {}}; }
};
// After the last action the connection is closed (FIN), unless it was reset.
using Script = std::vector<Action>;
// Chooses the script for the n-th request (1-based, across both ports).
using Scripter = std::function<Script(int n, const RawRequest&)>;

class HostileServer {
 public:
  HostileServer() {
    std::signal(SIGPIPE, SIG_IGN);
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0) throw std::runtime_error("hostile server: eventfd failed");
    for (int i = 0; i < 2; ++i) listen_on(i);
    thread_ = std::thread([this] { serve(); });
  }
  ~HostileServer() {
    stopping_ = true;
    const std::uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
    thread_.join();
    for (const int fd : listeners_) ::close(fd);
    ::close(wake_);
  }
  HostileServer(const HostileServer&) = delete;
  HostileServer& operator=(const HostileServer&) = delete;

  // The two ports; "host" 0 and 1 are two origins.
  int port(int host = 0) const { return ports_[host]; }
  std::string url(const std::string& path = "/", int host = 0) const {
    return "http://127.0.0.1:" + std::to_string(ports_[host]) + path;
  }

  // Replaces the script and forgets the requests seen so far.
  void script(Scripter s) {
    std::lock_guard lock(mu_);
    scripter_ = std::move(s);
    requests_.clear();
  }
  // The same script for every request.
  void always(Script s) {
    script([s = std::move(s)](int, const RawRequest&) { return s; });
  }

  std::vector<RawRequest> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  int request_count() {
    std::lock_guard lock(mu_);
    return static_cast<int>(requests_.size());
  }
  // Waits until `n` requests have been read (or 30 s, so a broken test still ends).
  bool wait_requests(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30),
                        [&] { return static_cast<int>(requests_.size()) >= n; });
  }
  // A barrier: returns once every connection made to either port before the call has
  // been served to its end (connections are served in the order they arrive, so a
  // marker request of the caller's own is answered after them). Then requests() holds
  // every request those connections sent, and the next script meets no stragglers.
  // False if the server did not answer within 30 s.
  bool sync() {
    for (int i = 0; i < 2; ++i) {
      if (!sync_port(ports_[i])) return false;
    }
    return true;
  }

 private:
  void listen_on(int i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("hostile server: socket failed");
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;  // the kernel picks a free port: no window for another process
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      throw std::runtime_error("hostile server: cannot listen on 127.0.0.1");
    }
    listeners_[i] = fd;
    ports_[i] = ntohs(addr.sin_port);
  }

  // Waits for `fd` to be ready for `events`, the wake fd, or `timeout` (-1: none).
  // Returns the fd's revents, or 0 on timeout; -1 once the server stops.
  int wait_fd(int fd, short events, int timeout_ms) {
    pollfd p[2] = {{fd, events, 0}, {wake_, POLLIN, 0}};
    for (;;) {
      if (stopping_) return -1;
      const int r = ::poll(p, 2, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (stopping_ || (p[1].revents & POLLIN) != 0) return -1;
      return r <= 0 ? 0 : p[0].revents;
    }
  }

  void serve() {
    while (!stopping_) {
      pollfd p[3] = {{listeners_[0], POLLIN, 0}, {listeners_[1], POLLIN, 0}, {wake_, POLLIN, 0}};
      const int r = ::poll(p, 3, -1);
      if (r < 0 && errno == EINTR) continue;
      if (stopping_ || r < 0) return;
      for (int i = 0; i < 2; ++i) {
        if ((p[i].revents & POLLIN) == 0) continue;
        const int conn = ::accept4(listeners_[i], nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        handle(conn, ports_[i]);
      }
    }
  }

  static constexpr std::string_view kSyncTarget = "/__hostile_server_sync__";

  bool sync_port(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    timeval tv{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    const std::string req = "GET " + std::string(kSyncTarget) + " HTTP/1.1\r\nHost: x\r\n\r\n";
    ok = ok && ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
    std::string got;
    char buf[256];
    for (ssize_t n; ok && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    return ok && got.starts_with("HTTP/1.1 204");
  }

  // Reads one request: the head up to the blank line, then a Content-Length body.
  // False if the client sent none (it closed, or connected and waited).
  bool read_request(int conn, RawRequest& req) {
    std::string data;
    std::size_t head_end = std::string::npos;
    char buf[4096];
    while (head_end == std::string::npos) {
      const int ev = wait_fd(conn, POLLIN, 30000);
      if (ev <= 0) return false;
      const ssize_t n = ::recv(conn, buf, sizeof buf, 0);
      if (n <= 0) return false;
      data.append(buf, static_cast<std::size_t>(n));
      head_end = data.find("\r\n\r\n");
      if (data.size() > (1u << 20)) return false;
    }
    std::string_view head(data.data(), head_end);
    const auto line_end = head.find("\r\n");
    const std::string_view first = head.substr(0, line_end);
    const auto sp1 = first.find(' ');
    const auto sp2 = first.find(' ', sp1 + 1);
    if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) return false;
    req.method = std::string(first.substr(0, sp1));
    req.target = std::string(first.substr(sp1 + 1, sp2 - sp1 - 1));
    std::size_t length = 0;
    std::size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      auto end = head.find("\r\n", pos);
      if (end == std::string_view::npos) end = head.size();
      const std::string_view line = head.substr(pos, end - pos);
      const auto colon = line.find(':');
      if (colon != std::string_view::npos) {
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        req.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
      }
      pos = end + 2;
    }
    if (auto cl = req.header("Content-Length")) length = std::stoul(*cl);
    req.body = data.substr(head_end + 4);
    while (req.body.size() < length) {
      const int ev = wait_fd(conn, POLLIN, 30000);
      if (ev <= 0) return false;
      const ssize_t n = ::recv(conn, buf, sizeof buf, 0);
      if (n <= 0) return false;
      req.body.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }

  bool send_all(int conn, std::string_view bytes) {
    while (!bytes.empty()) {
      const int ev = wait_fd(conn, POLLOUT, 30000);
      if (ev <= 0 || (ev & (POLLERR | POLLHUP)) != 0) return false;
      const ssize_t n = ::send(conn, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // True while the client keeps the connection open (after waiting up to `ms`).
  bool client_still_there(int conn, int ms) {
    const int ev = wait_fd(conn, POLLIN | POLLRDHUP, ms);
    if (ev < 0) return false;
    if (ev == 0) return true;
    if ((ev & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return false;
    char c;
    return ::recv(conn, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  void handle(int conn, int port) {
    RawRequest req;
    req.port = port;
    if (!read_request(conn, req)) {
      ::close(conn);
      return;
    }
    if (req.target == kSyncTarget) {
      send_all(conn, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
      ::shutdown(conn, SHUT_WR);
      ::close(conn);
      return;
    }
    Script script;
    {
      std::lock_guard lock(mu_);
      requests_.push_back(req);
      if (scripter_) script = scripter_(static_cast<int>(requests_.size()), req);
    }
    cv_.notify_all();
    bool open = true, reset = false;
    for (const Action& a : script) {
      if (!open) break;
      switch (a.kind) {
        case Action::Kind::send:
          open = send_all(conn, a.bytes);
          break;
        case Action::Kind::trickle:
          for (const char c : a.bytes) {
            if (!client_still_there(conn, static_cast<int>(a.pause.count())) ||
                !send_all(conn, std::string_view(&c, 1))) {
              open = false;
              break;
            }
          }
          break;
        case Action::Kind::hold:
          // A client that sends another request on this connection (keep-alive) has
          // it recorded, and unanswered.
          while (client_still_there(conn, -1)) {
            RawRequest next;
            next.port = port;
            if (!read_request(conn, next)) break;
            {
              std::lock_guard lock(mu_);
              requests_.push_back(std::move(next));
            }
            cv_.notify_all();
          }
          open = false;
          break;
        case Action::Kind::reset: {
          const linger l{1, 0};
          ::setsockopt(conn, SOL_SOCKET, SO_LINGER, &l, sizeof l);
          reset = true;
          open = false;
          break;
        }
      }
    }
    if (!reset) ::shutdown(conn, SHUT_WR);
    ::close(conn);
  }

  int listeners_[2] = {-1, -1};
  int ports_[2] = {0, 0};
  int wake_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  Scripter scripter_;
  std::vector<RawRequest> requests_;
};

// A well-formed response with a body: the building block of most scripts.
inline std::string http_response(int status, const std::string& reason, const std::string& body,
                                 const std::vector<std::string>& extra_headers = {}) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
  for (const auto& h : extra_headers) r += h + "\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  return r;
}

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_HTTP_HOSTILE_SERVER_H_
