// A test upstream on an ephemeral 127.0.0.1 port (cpp-httplib), started by the test
// and stopped by its destructor. It counts requests, records what it saw, and can hold
// requests until the test releases them, so timing never decides a test's outcome.

#ifndef BULWARK_TESTS_HTTP_UPSTREAM_H_
#define BULWARK_TESTS_HTTP_UPSTREAM_H_

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../loopback_port.h"

namespace bulwark::testing {

class Upstream {
 public:
  using Handler = std::function<void(int n, const httplib::Request&, httplib::Response&)>;

  explicit Upstream(Handler handler, std::string key_header = "Idempotency-Key")
      : handler_(std::move(handler)), key_header_(std::move(key_header)) {
    std::signal(SIGPIPE, SIG_IGN);
    auto serve = [this](const httplib::Request& req, httplib::Response& res) {
      int n = 0;
      {
        std::lock_guard lock(mu_);
        n = ++requests_;
        keys_.push_back(req.get_header_value(key_header_.c_str()));
        methods_.push_back(req.method);
        ++in_handler_;
      }
      cv_.notify_all();
      handler_(n, req, res);
      {
        std::lock_guard lock(mu_);
        --in_handler_;
      }
      cv_.notify_all();
    };
    server_.Get(".*", serve);
    server_.Post(".*", serve);
    server_.Put(".*", serve);
    server_.Patch(".*", serve);
    server_.Delete(".*", serve);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be missed: wait until it is serving.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // An upstream that holds every request until release() (or 30 s), then answers 200
  // with `body`: requests stay in flight for as long as the test needs them to.
  struct Holding {
    std::string body = "ok";
  };
  explicit Upstream(Holding h)
      : Upstream(
            [this, body = std::move(h.body)](int, const httplib::Request&, httplib::Response& res) {
              hold();
              res.set_content(body, "text/plain");
            }) {}
  ~Upstream() {
    release();
    server_.stop();
    thread_.join();
  }
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path = "/") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::vector<std::string> keys() {
    std::lock_guard lock(mu_);
    return keys_;
  }
  std::vector<std::string> methods() {
    std::lock_guard lock(mu_);
    return methods_;
  }
  // Blocks the calling handler until release() (or 30 s, so a broken test still ends).
  void hold() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(30), [this] { return released_; });
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  // Waits until `n` requests have arrived (or 30 s).
  bool wait_requests(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return requests_ >= n; });
  }
  bool wait_in_handler(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return in_handler_ >= n; });
  }

 private:
  Handler handler_;
  std::string key_header_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int requests_ = 0;
  int in_handler_ = 0;
  bool released_ = false;
  std::vector<std::string> keys_;
  std::vector<std::string> methods_;
};

// A free loopback port with nothing listening on it: a connection to it is refused.
inline int closed_port() { return free_loopback_port(); }

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_HTTP_UPSTREAM_H_
