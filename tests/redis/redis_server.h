// A redis-server of the test's own on a free 127.0.0.1 port: started with no
// persistence, stopped (or killed, paused, restarted) by the test.

#ifndef BULWARK_TESTS_REDIS_REDIS_SERVER_H_
#define BULWARK_TESTS_REDIS_REDIS_SERVER_H_

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../loopback_port.h"

namespace bulwark::testing {

inline bool redis_server_available() {
  return std::system("command -v redis-server >/dev/null 2>&1") == 0;
}

inline int free_port() { return free_loopback_port(); }

class RedisServer {
 public:
  explicit RedisServer(std::vector<std::string> extra = {})
      : port_(free_port()), extra_(std::move(extra)) {}
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  ~RedisServer() { stop(); }

  // Starts it and waits (polling, up to 10 s) until it answers PING.
  bool start() {
    std::vector<std::string> args = {
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save",   "",
        "--appendonly", "no",     "--daemonize",         "no",     "--logfile", "/dev/null"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ping()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void stop() { signal_and_reap(SIGTERM); }
  void kill() { signal_and_reap(SIGKILL); }
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }

  // Runs one command on a connection of its own; returns the reply as text.
  std::string command(std::vector<std::string> args) const {
    redisContext* c = connect();
    if (c == nullptr) return "(no connection)";
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (auto& a : args) argv.push_back(a.c_str()), len.push_back(a.size());
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), len.data()));
    std::string out = "(error)";
    if (r != nullptr) {
      if (r->type == REDIS_REPLY_INTEGER) {
        out = std::to_string(r->integer);
      } else if (r->str != nullptr) {
        out = std::string(r->str, r->len);
      } else if (r->type == REDIS_REPLY_NIL) {
        out = "(nil)";
      } else {
        out = "(array)";
      }
      freeReplyObject(r);
    }
    redisFree(c);
    return out;
  }

  // Every key matching `pattern` (SCAN MATCH, to the end of the cursor).
  std::vector<std::string> scan(const std::string& pattern) const {
    std::vector<std::string> keys;
    redisContext* c = connect();
    if (c == nullptr) return keys;
    std::string cursor = "0";
    do {
      auto* r = static_cast<redisReply*>(redisCommand(
          c, "SCAN %s MATCH %b COUNT 100", cursor.c_str(), pattern.data(), pattern.size()));
      if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        if (r != nullptr) freeReplyObject(r);
        break;
      }
      cursor.assign(r->element[0]->str, r->element[0]->len);
      for (size_t i = 0; i < r->element[1]->elements; ++i)
        keys.emplace_back(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
      freeReplyObject(r);
    } while (cursor != "0");
    redisFree(c);
    return keys;
  }

  int port() const { return port_; }

 private:
  redisContext* connect() const {
    timeval tv{1, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    if (c == nullptr || c->err != 0) {
      if (c != nullptr) redisFree(c);
      return nullptr;
    }
    redisSetTimeout(c, tv);
    return c;
  }
  bool ping() const {
    const std::string r = command({"PING"});
    return r == "PONG" || r.find("NOAUTH") != std::string::npos;
  }
  void signal_and_reap(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  int port_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_REDIS_REDIS_SERVER_H_
