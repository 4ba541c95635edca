// A redis-server of the test's own on a free 127.0.0.1 port: started with no automatic
// persistence, stopped (or killed, paused, restarted on the same port) by the test.
// Given a directory, it keeps its snapshot there (SAVE writes it, a restart loads it).

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

// A test that needs redis-server may skip without one only while the environment
// variable BULWARK_REQUIRE_SERVERS is unset (CI sets it): "" if it may run, else why not.
// Use: if (auto why = bulwark::testing::redis_server_missing(); !why.empty()) { ... }
inline bool servers_required() { return std::getenv("BULWARK_REQUIRE_SERVERS") != nullptr; }
inline std::string redis_server_missing() {
  if (redis_server_available()) return "";
  return "redis-server is not installed (Debian: apt-get install redis-server)";
}

inline int free_port() { return free_loopback_port(); }

class RedisServer {
 public:
  explicit RedisServer(std::vector<std::string> extra = {}, std::string dir = {})
      : port_(free_port()), extra_(std::move(extra)), dir_(std::move(dir)) {}
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  ~RedisServer() { stop(); }

  // Starts it and waits (polling, up to 10 s) until it answers PING.
  bool start() {
    std::vector<std::string> args = {
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save",   "",
        "--appendonly", "no",     "--daemonize",         "no",     "--logfile", "/dev/null"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    if (!dir_.empty()) {
      for (const char* a : {"--dir", dir_.c_str(), "--dbfilename", "dump.rdb"}) args.push_back(a);
    }
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
  bool running() const { return pid_ > 0; }
  // The snapshot a restart loads: "" without a directory.
  std::string snapshot() const { return dir_.empty() ? std::string() : dir_ + "/dump.rdb"; }

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
  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_REDIS_REDIS_SERVER_H_
