// A Redis Cluster of the test's own: six redis-server processes (cluster-enabled, each on
// a free 127.0.0.1 port whose bus port, +10000, is free too, each in its own temporary
// directory, no persistence), made a cluster of three masters with one replica each by
// `redis-cli --cluster create` (bounded by `timeout 60`), and waited for (cluster_state:ok
// on every node, polled, bounded). The destructor kills every process it started (also
// a paused one) and removes the directories.

#ifndef BULWARK_TESTS_REDIS_REDIS_CLUSTER_H_
#define BULWARK_TESTS_REDIS_REDIS_CLUSTER_H_

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "redis/redis_server.h"

namespace bulwark::testing {

class RedisCluster {
 public:
  struct NodeInfo {
    std::string id;
    int port = 0;
    bool master = false;
    bool failed = false;
    std::string master_id;  // a replica's master
    bool myself = false;
    bool serves = false;  // a master with slots
  };

  RedisCluster() = default;
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;
  ~RedisCluster() {
    servers_.clear();  // each kills its process
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  // Starts the six nodes and creates the cluster: "" on success, else what failed.
  std::string start() {
    char tmpl[] = "/tmp/bulwark-cluster-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return "mkdtemp failed";
    dir_ = tmpl;
    std::string create = "timeout 60 redis-cli --cluster create";
    for (int i = 0; i < 6; ++i) {
      const std::string dir = dir_ + "/" + std::to_string(i);
      std::filesystem::create_directories(dir);
      std::unique_ptr<RedisServer> s;
      for (int attempt = 0; attempt < 50; ++attempt) {
        auto candidate = std::make_unique<RedisServer>(
            std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                     "nodes.conf", "--cluster-node-timeout", "5000"},
            dir);
        const int port = candidate->port();
        if (port > 0 && port + 10000 <= 65535 && port_free(port + 10000)) {
          s = std::move(candidate);
          break;
        }
      }
      if (!s) return "no free port pair (port, port + 10000)";
      if (!s->start()) return "redis-server did not start on port " + std::to_string(s->port());
      create += " 127.0.0.1:" + std::to_string(s->port());
      servers_.push_back(std::move(s));
    }
    create += " --cluster-replicas 1 --cluster-yes >" + dir_ + "/create.log 2>&1";
    if (std::system(create.c_str()) != 0) return "redis-cli --cluster create failed: " + create;
    if (!wait_ok()) return "the cluster did not reach cluster_state:ok";
    return "";
  }

  // Every running node reports cluster_state:ok, and all of them see the same masters
  // (serving slots) and replicas, each node as it sees itself (polled, up to `limit`).
  bool wait_ok(std::chrono::seconds limit = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (settled()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Each running node as it describes itself (the "myself" line of its CLUSTER NODES).
  std::vector<NodeInfo> nodes() const {
    std::vector<NodeInfo> out;
    for (auto& s : servers_) {
      if (!s->running() || paused(s.get())) continue;
      for (const NodeInfo& n : view(s.get())) {
        if (n.myself) out.push_back(n);
      }
    }
    return out;
  }

  RedisServer* server(int port) {
    for (auto& s : servers_) {
      if (s->port() == port) return s.get();
    }
    return nullptr;
  }
  RedisServer* master_of_slot(int slot) {
    for (auto& s : servers_) {
      if (!s->running() || paused(s.get())) continue;
      const std::string who = s->command({"CLUSTER", "NODES"});
      std::istringstream lines(who);
      std::string line;
      while (std::getline(lines, line)) {
        std::istringstream f(line);
        std::string id, addr, flags, master, a, b, c, state, range;
        f >> id >> addr >> flags >> master >> a >> b >> c >> state;
        if (flags.find("master") == std::string::npos) continue;
        while (f >> range) {
          if (range.front() == '[') continue;
          const auto dash = range.find('-');
          const int from = std::atoi(range.c_str());
          const int to = dash == std::string::npos ? from : std::atoi(range.c_str() + dash + 1);
          if (slot >= from && slot <= to)
            return server(std::atoi(addr.c_str() + addr.find(':') + 1));
        }
      }
      break;
    }
    return nullptr;
  }
  std::string node_id(RedisServer* s) const { return s->command({"CLUSTER", "MYID"}); }
  void pause(RedisServer* s) {
    s->pause();
    paused_.push_back(s);
  }
  void resume(RedisServer* s) {
    s->resume();
    std::erase(paused_, s);
  }
  int seed_port() const { return servers_.front()->port(); }
  const std::vector<std::unique_ptr<RedisServer>>& servers() const { return servers_; }

 private:
  // CLUSTER NODES as `s` sees it.
  static std::vector<NodeInfo> view(const RedisServer* s) {
    std::vector<NodeInfo> out;
    std::istringstream lines(s->command({"CLUSTER", "NODES"}));
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      NodeInfo n;
      std::string addr, flags, ping, pong, epoch, link, range;
      f >> n.id >> addr >> flags >> n.master_id >> ping >> pong >> epoch >> link;
      if (addr.empty()) continue;
      n.port = std::atoi(addr.c_str() + addr.find(':') + 1);
      n.master = flags.find("master") != std::string::npos;
      n.failed = flags.find("fail") != std::string::npos;
      n.myself = flags.find("myself") != std::string::npos;
      n.serves = n.master && !n.failed && static_cast<bool>(f >> range);
      out.push_back(n);
    }
    return out;
  }
  bool settled() const {
    std::string first;
    for (auto& s : servers_) {
      if (!s->running() || paused(s.get())) continue;
      if (s->command({"CLUSTER", "INFO"}).find("cluster_state:ok") == std::string::npos)
        return false;
      std::string roles;
      for (const NodeInfo& n : view(s.get())) {
        if (n.failed && !n.master) continue;
        roles += n.id + (n.serves ? "=serves " : n.master ? "=master " : "=replica ");
      }
      std::vector<std::string> sorted;
      std::istringstream words(roles);
      for (std::string w; words >> w;) sorted.push_back(w);
      std::sort(sorted.begin(), sorted.end());
      std::string key;
      for (const auto& w : sorted) key += w + " ";
      if (first.empty()) {
        first = key;
      } else if (key != first) {
        return false;
      }
    }
    return !first.empty();
  }
  bool paused(const RedisServer* s) const {
    for (auto* p : paused_) {
      if (p == s) return true;
    }
    return false;
  }
  static bool port_free(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
  }

  std::string dir_;
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<const RedisServer*> paused_;
};

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_REDIS_REDIS_CLUSTER_H_
