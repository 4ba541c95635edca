#include "bulwark/redis/cluster_store.h"

#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>
#include <set>

#include "redis_wire.h"

namespace bulwark::redis {

using namespace wire;

std::uint16_t crc16(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (const char ch : bytes) {
    crc = static_cast<std::uint16_t>(crc ^ (static_cast<unsigned char>(ch) << 8));
    for (int i = 0; i < 8; ++i) {
      crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<std::uint16_t>(crc << 1);
    }
  }
  return crc;
}

std::uint16_t key_slot(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<std::uint16_t>(crc16(key) & 16383);
}

namespace {

constexpr std::size_t kSlots = 16384;

std::string text_of(const redisReply* r) {
  if (r->str == nullptr) return "";
  return std::string(r->str, r->len);
}

// "host:port" (the last colon separates them): false if it is not one.
bool split_address(std::string_view a, std::string& host, int& port) {
  const auto colon = a.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  const std::string_view p = a.substr(colon + 1);
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port <= 0 || port > 65535) return false;
  host = std::string(a.substr(0, colon));
  return true;
}

}  // namespace

struct RedisClusterStore::Node {
  enum class Expect : std::uint8_t { auth, load, asking, script, read, slots };
  struct Pending {
    Expect kind;
    Call* call;
  };
  std::string host;
  int port = 0;
  std::string name;
  redisContext* ctx = nullptr;
  std::chrono::steady_clock::time_point next_attempt{};
  std::uint32_t failures = 0;
  std::uint64_t connection = 0;  // counts the connections made: a new one is a new number
  std::minstd_rand rng{std::random_device{}()};
  std::deque<Pending> pending;  // the replies this exchange waits for, in order

  ~Node() {
    if (ctx != nullptr) redisFree(ctx);
  }
  // Drops the connection (whatever state it is in) and schedules the next attempt.
  void drop(const RedisConfig& c) {
    if (ctx != nullptr) redisFree(ctx);
    ctx = nullptr;
    pending.clear();
    const std::int64_t base = c.reconnect_min.count();
    const std::int64_t cap = std::min<std::int64_t>(c.reconnect_max.count(),
                                                    base << std::min<std::uint32_t>(failures, 20));
    ++failures;
    std::uniform_int_distribution<std::int64_t> jitter(cap / 2, cap);
    next_attempt = std::chrono::steady_clock::now() + std::chrono::milliseconds(jitter(rng));
  }
};

struct RedisClusterStore::Call {
  std::uint32_t group = 0;
  std::vector<const FleetOp*> ops;
  std::vector<std::size_t> op_index;
  Node* target = nullptr;
  bool asking = false;
  bool eval = false;
  bool read = false;    // the cheap read (GET seq, GET id, TIME) rather than the script
  bool resent = false;  // sent again once already (a redirect, a lost script)
  bool answered = false;
  ReplyPtr reply;                  // the script's
  std::vector<ReplyPtr> reads;     // the cheap read's three
  std::optional<SyncReply> quiet;  // the read found nothing to say: the group's part
  std::optional<StoreError> error;
};

RedisClusterStore::RedisClusterStore(ClusterConfig config)
    : config_(std::move(config)), merge_(std::clamp<std::uint32_t>(config_.groups, 1, 1000)) {
  { RedisFleetStore check(config_.redis); }  // validates host, port, prefix, times, auth
  if (config_.groups < 1 || config_.groups > 1000)
    bad("groups", "must be in 1..1000, got " + std::to_string(config_.groups));
  for (const std::string& s : config_.seeds) {
    std::string host;
    int port = 0;
    if (!split_address(s, host, port)) bad("seeds", "'" + s + "' is not host:port");
  }
  const std::string& p = config_.redis.prefix;
  const auto close = p.find('}', p.find('{') + 1);
  groups_.resize(config_.groups);
  for (std::uint32_t g = 0; g < config_.groups; ++g) {
    Group& group = groups_[g];
    if (config_.groups == 1) {
      group.prefix = p;  // RedisFleetStore's keys
    } else {
      char tag[16];
      std::snprintf(tag, sizeof tag, ":%02u", g);
      group.prefix = p.substr(0, close) + tag + p.substr(close);
    }
    group.slot = key_slot(group.prefix);
  }
  const auto ttl = config_.redis.idle_ttl;
  if (config_.heartbeat < std::chrono::milliseconds::zero())
    bad("heartbeat", "must not be negative (zero: the default)");
  if (config_.heartbeat >= ttl)
    bad("heartbeat", "must be below idle_ttl (" + std::to_string(ttl.count()) +
                         " ms), or the group's keys expire between two heartbeats");
  heartbeat_ = config_.heartbeat > std::chrono::milliseconds::zero()
                   ? config_.heartbeat
                   : std::min<std::chrono::milliseconds>(ttl / 8, std::chrono::minutes(5));
}

RedisClusterStore::~RedisClusterStore() {
  std::lock_guard lock(mu_);  // an exchange() on another thread returns by its deadline
  nodes_.clear();
}

std::uint32_t RedisClusterStore::group_of(std::string_view key) const noexcept {
  return detail::group_of(key, config_.groups);
}

std::string RedisClusterStore::node_of(std::uint32_t group) const {
  if (!config_.cluster) return config_.redis.host + ":" + std::to_string(config_.redis.port);
  if (slots_.empty() || slots_[groups_[group].slot] == nullptr) return "";
  return slots_[groups_[group].slot]->name;
}

RedisClusterStore::Node& RedisClusterStore::node(const std::string& host, int port) {
  const std::string name = host + ":" + std::to_string(port);
  auto& n = nodes_[name];
  if (!n) {
    n = std::make_unique<Node>();
    n->host = host;
    n->port = port;
    n->name = name;
  }
  return *n;
}

namespace {

// Connects `n` (if not connected and not waiting out its backoff) and queues AUTH and
// SCRIPT LOAD on the new connection.
template <class NodeT>
std::optional<StoreError> ensure_connected(NodeT& n, const RedisConfig& cfg, Deadline deadline) {
  if (n.ctx != nullptr) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  if (now < n.next_attempt) {
    const auto wait =
        std::chrono::duration_cast<std::chrono::milliseconds>(n.next_attempt - now).count();
    return StoreError{StoreError::Kind::unavailable,
                      n.name + ": not connected; next attempt in " + std::to_string(wait) + " ms"};
  }
  const auto left = left_until(deadline);
  if (left <= std::chrono::microseconds::zero())
    return StoreError{StoreError::Kind::timeout, n.name + ": no time left to connect"};
  redisContext* c = redisConnectWithTimeout(n.host.c_str(), n.port, to_timeval(left));
  if (c == nullptr) return StoreError{StoreError::Kind::unavailable, "out of memory"};
  n.ctx = c;
  if (c->err != 0) {
    const bool timeout = c->err == REDIS_ERR_IO && (errno == ETIMEDOUT || errno == EINPROGRESS);
    StoreError e{timeout ? StoreError::Kind::timeout : StoreError::Kind::unavailable,
                 "connecting to " + n.name + ": " + c->errstr};
    n.drop(cfg);
    return e;
  }
  ++n.connection;
  using Expect = typename NodeT::Expect;
  if (!cfg.password.empty()) {
    if (cfg.username.empty()) {
      const char* argv[] = {"AUTH", cfg.password.c_str()};
      const size_t len[] = {4, cfg.password.size()};
      redisAppendCommandArgv(c, 2, argv, len);
    } else {
      const char* argv[] = {"AUTH", cfg.username.c_str(), cfg.password.c_str()};
      const size_t len[] = {4, cfg.username.size(), cfg.password.size()};
      redisAppendCommandArgv(c, 3, argv, len);
    }
    n.pending.push_back({Expect::auth, nullptr});
  }
  const char* script = fleet_script();
  const char* argv[] = {"SCRIPT", "LOAD", script};
  const size_t len[] = {6, 4, std::char_traits<char>::length(script)};
  redisAppendCommandArgv(c, 3, argv, len);
  n.pending.push_back({Expect::load, nullptr});
  return std::nullopt;
}

}  // namespace

// Writes every node's queued commands, then reads their replies together (one poll()
// over the sockets) until each node answered everything or the deadline passed. A node
// that fails (I/O, timeout, a reply that is not RESP, AUTH refused) is dropped and each
// of its calls not answered yet gets the error.
void RedisClusterStore::run(std::vector<Call*>& calls, Deadline deadline) {
  std::vector<Node*> active;
  auto fail = [&](Node& n, const StoreError& e) {
    for (const auto& p : n.pending) {
      if (p.call != nullptr && !p.call->answered && !p.call->reply && !p.call->error)
        p.call->error = e;
    }
    n.drop(config_.redis);
    if (config_.cluster) map_stale_ = true;
  };
  // Queues `call` on its node (connecting it if need be).
  auto append = [&](Call* call) {
    call->reply.reset();
    call->reads.clear();
    call->answered = false;
    call->error.reset();
    Node& n = *call->target;
    if (auto e = ensure_connected(n, config_.redis, deadline)) {
      call->error = StoreError{e->kind, e->message};
      if (config_.cluster && e->message.find("next attempt") == std::string::npos)
        map_stale_ = true;
      return;
    }
    if (std::find(active.begin(), active.end(), &n) == active.end()) active.push_back(&n);
    if (call->read) {
      // The group's counter and incarnation, and the node's clock: plain commands.
      const std::string& prefix = groups_[call->group].prefix;
      const std::string seq = prefix + "seq", id = prefix + "id";
      const char* get_seq[] = {"GET", seq.c_str()};
      const char* get_id[] = {"GET", id.c_str()};
      const size_t seq_len[] = {3, seq.size()}, id_len[] = {3, id.size()};
      const char* time[] = {"TIME"};
      const size_t time_len[] = {4};
      redisAppendCommandArgv(n.ctx, 2, get_seq, seq_len);
      redisAppendCommandArgv(n.ctx, 2, get_id, id_len);
      redisAppendCommandArgv(n.ctx, 1, time, time_len);
      for (int i = 0; i < 3; ++i) n.pending.push_back({Node::Expect::read, call});
      reads_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (call->asking) {
      const char* argv[] = {"ASKING"};
      const size_t len[] = {6};
      redisAppendCommandArgv(n.ctx, 1, argv, len);
      n.pending.push_back({Node::Expect::asking, call});
    }
    const bool eval = call->eval || sha_.empty();
    const auto args = script_args(
        eval ? std::string(fleet_script()) : sha_, eval, groups_[call->group].prefix, *request_,
        call->ops, merge_.cursor(call->group), config_.redis.retention, config_.redis.idle_ttl);
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(n.ctx, static_cast<int>(argv.size()), argv.data(), lens.data());
    n.pending.push_back({Node::Expect::script, call});
    script_calls_.fetch_add(1, std::memory_order_relaxed);
  };
  // Sends what `n` holds.
  auto flush = [&](Node* n) {
    const auto left = left_until(deadline);
    if (left <= std::chrono::microseconds::zero()) {
      fail(*n, {StoreError::Kind::timeout, n->name + ": no time left to send"});
      return;
    }
    redisSetTimeout(n->ctx, to_timeval(left));
    int done = 0;
    while (done == 0 && n->ctx != nullptr) {
      if (redisBufferWrite(n->ctx, &done) != REDIS_OK) {
        fail(*n, {StoreError::Kind::unavailable,
                  n->name + ": " + (n->ctx->errstr[0] != '\0' ? n->ctx->errstr : "write failed")});
        break;
      }
      if (done == 0 && !wait_for(n->ctx->fd, POLLOUT, deadline)) {
        fail(*n, {StoreError::Kind::timeout, n->name + ": no answer by the deadline"});
        break;
      }
    }
  };
  for (Call* call : calls) append(call);
  for (Node* n : active) flush(n);
  // Read, from every node at once.
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Node*> waiting;
    for (Node* n : active) {
      if (n->ctx == nullptr || n->pending.empty()) continue;
      fds.push_back({n->ctx->fd, POLLIN, 0});
      waiting.push_back(n);
    }
    if (waiting.empty()) break;
    const auto left = left_until(deadline);
    if (left <= std::chrono::microseconds::zero()) {
      for (Node* n : waiting) {
        fail(*n, {StoreError::Kind::timeout, n->name + ": no answer by the deadline (timeout " +
                                                 std::to_string(config_.redis.timeout.count()) +
                                                 " ms)"});
      }
      break;
    }
    const int ms = static_cast<int>(std::min<std::int64_t>((left.count() + 999) / 1000, 1'000'000));
    const int r = ::poll(fds.data(), fds.size(), ms);
    if (r < 0 && errno != EINTR) {
      for (Node* n : waiting) fail(*n, {StoreError::Kind::unavailable, "poll() failed"});
      break;
    }
    for (std::size_t i = 0; i < fds.size() && r > 0; ++i) {
      if (fds[i].revents == 0) continue;
      Node& n = *waiting[i];
      redisSetTimeout(n.ctx,
                      to_timeval(std::max(left_until(deadline), std::chrono::microseconds(1))));
      if (redisBufferRead(n.ctx) != REDIS_OK) {
        const bool timeout =
            n.ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        fail(n, {timeout ? StoreError::Kind::timeout : StoreError::Kind::unavailable,
                 n.name + ": " + (n.ctx->errstr[0] != '\0' ? n.ctx->errstr : "read failed")});
        continue;
      }
      while (n.ctx != nullptr && !n.pending.empty()) {
        void* raw = nullptr;
        if (redisGetReplyFromReader(n.ctx, &raw) != REDIS_OK) {
          fail(n, {StoreError::Kind::protocol,
                   n.name + ": the server's reply is not RESP: " + n.ctx->errstr});
          break;
        }
        if (raw == nullptr) break;
        ReplyPtr reply(static_cast<redisReply*>(raw));
        const Node::Pending p = n.pending.front();
        n.pending.pop_front();
        const bool error = reply->type == REDIS_REPLY_ERROR;
        if (p.kind == Node::Expect::auth && error) {
          fail(n, {StoreError::Kind::rejected, n.name + ": AUTH refused: " + text_of(reply.get())});
        } else if (p.kind == Node::Expect::load) {
          if (error || reply->type != REDIS_REPLY_STRING) {
            fail(n, {error ? StoreError::Kind::rejected : StoreError::Kind::protocol,
                     n.name + ": SCRIPT LOAD " +
                         (error ? "refused: " + text_of(reply.get()) : "did not return a hash")});
          } else {
            sha_ = text_of(reply.get());
          }
        } else if (p.kind == Node::Expect::script) {
          p.call->reply = std::move(reply);
          p.call->answered = true;
        } else if (p.kind == Node::Expect::read) {
          p.call->reads.push_back(std::move(reply));
          p.call->answered = p.call->reads.size() == 3;
        }
        // ASKING: its +OK (or error, which the script call's own reply then explains).
      }
      if (n.ctx != nullptr && n.pending.empty()) {
        n.failures = 0;
        if (n.ctx->reader != nullptr && n.ctx->reader->pos < n.ctx->reader->len) {
          fail(n, {StoreError::Kind::protocol, n.name + ": the server sent more than asked"});
          continue;
        }
        // The node answered its reads: the groups that have something to say get their
        // script now, on this node only, while the others' replies are still awaited.
        bool more = false;
        for (Call* c : calls) {
          if (c->read && c->target == &n && c->answered && !c->error && !c->quiet &&
              read_wants_script(*c)) {
            c->read = false;
            append(c);
            more = more || !c->error;
          }
        }
        if (more && n.ctx != nullptr) flush(&n);
      }
    }
  }
}

Expected<void, StoreError> RedisClusterStore::read_map(Deadline deadline) {
  // Known connected nodes first, then the configured ones, then any other known.
  std::vector<Node*> order;
  auto add = [&](Node* n) {
    if (std::find(order.begin(), order.end(), n) == order.end()) order.push_back(n);
  };
  for (auto& [name, n] : nodes_) {
    if (n->ctx != nullptr) add(n.get());
  }
  add(&node(config_.redis.host, config_.redis.port));
  for (const std::string& s : config_.seeds) {
    std::string host;
    int port = 0;
    split_address(s, host, port);
    add(&node(host, port));
  }
  for (auto& [name, n] : nodes_) add(n.get());
  StoreError last{StoreError::Kind::unavailable, "no node to read the slot map from"};
  for (Node* n : order) {
    const auto left = left_until(deadline);
    if (left <= std::chrono::microseconds::zero()) break;
    // Half of what is left for each node, so that one that answers nothing leaves time
    // for another (and for the exchange).
    const Deadline until = std::chrono::steady_clock::now() + left / 2;
    if (auto e = ensure_connected(*n, config_.redis, until)) {
      last = *e;
      continue;
    }
    const char* argv[] = {"CLUSTER", "SLOTS"};
    const size_t len[] = {7, 5};
    redisAppendCommandArgv(n->ctx, 2, argv, len);
    Call probe;  // receives the CLUSTER SLOTS reply
    probe.target = n;
    n->pending.push_back({Node::Expect::script, &probe});
    // Flush and read what `n` has queued: AUTH and SCRIPT LOAD if it just connected.
    {
      Node& m = *n;
      redisSetTimeout(m.ctx, to_timeval(left_until(until)));
      int done = 0;
      bool ok = true;
      while (done == 0) {
        if (redisBufferWrite(m.ctx, &done) != REDIS_OK ||
            (done == 0 && !wait_for(m.ctx->fd, POLLOUT, until))) {
          ok = false;
          last = {StoreError::Kind::unavailable, m.name + ": could not send CLUSTER SLOTS"};
          break;
        }
      }
      while (ok && !m.pending.empty()) {
        void* raw = nullptr;
        if (redisGetReplyFromReader(m.ctx, &raw) != REDIS_OK) {
          ok = false;
          last = {StoreError::Kind::protocol, m.name + ": the server's reply is not RESP"};
          break;
        }
        if (raw == nullptr) {
          if (!wait_for(m.ctx->fd, POLLIN, until)) {
            ok = false;
            last = {StoreError::Kind::timeout, m.name + ": no slot map by the deadline"};
            break;
          }
          redisSetTimeout(m.ctx,
                          to_timeval(std::max(left_until(until), std::chrono::microseconds(1))));
          if (redisBufferRead(m.ctx) != REDIS_OK) {
            ok = false;
            last = {StoreError::Kind::unavailable, m.name + ": " + m.ctx->errstr};
            break;
          }
          continue;
        }
        ReplyPtr reply(static_cast<redisReply*>(raw));
        const Node::Pending p = m.pending.front();
        m.pending.pop_front();
        if (reply->type == REDIS_REPLY_ERROR && p.kind != Node::Expect::script) {
          ok = false;
          last = {StoreError::Kind::rejected,
                  m.name + ": " + (p.kind == Node::Expect::auth ? "AUTH" : "SCRIPT LOAD") +
                      " refused: " + text_of(reply.get())};
          break;
        }
        if (p.kind == Node::Expect::load && reply->type == REDIS_REPLY_STRING)
          sha_ = text_of(reply.get());
        if (p.kind == Node::Expect::script) probe.reply = std::move(reply);
      }
      if (!ok) {
        m.drop(config_.redis);
        continue;
      }
    }
    const redisReply* r = probe.reply.get();
    if (r == nullptr) continue;
    if (r->type == REDIS_REPLY_ERROR) {
      last = {StoreError::Kind::rejected, n->name + ": CLUSTER SLOTS refused: " + text_of(r)};
      continue;
    }
    auto malformed = [&](const std::string& what) {
      last = {StoreError::Kind::protocol, n->name + ": the slot map (CLUSTER SLOTS) " + what};
    };
    if (r->type != REDIS_REPLY_ARRAY) {
      malformed("is not an array");
      continue;
    }
    std::vector<Node*> slots(kSlots, nullptr);
    bool ok = true;
    for (std::size_t i = 0; i < r->elements && ok; ++i) {
      const redisReply* e = r->element[i];
      const std::string where = "entry " + std::to_string(i);
      if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) {
        malformed(where + " is not [start, end, master, ...]");
        ok = false;
        break;
      }
      const redisReply *from = e->element[0], *to = e->element[1], *master = e->element[2];
      if (from->type != REDIS_REPLY_INTEGER || to->type != REDIS_REPLY_INTEGER ||
          from->integer < 0 || to->integer >= static_cast<long long>(kSlots) ||
          from->integer > to->integer) {
        malformed(where + " has no slot range within 0..16383");
        ok = false;
        break;
      }
      if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 ||
          master->element[0]->type != REDIS_REPLY_STRING ||
          master->element[1]->type != REDIS_REPLY_INTEGER || master->element[1]->integer <= 0 ||
          master->element[1]->integer > 65535) {
        malformed(where + " names no master as [host, port, ...]");
        ok = false;
        break;
      }
      std::string host = text_of(master->element[0]);
      if (host.empty() || host == "?") host = n->host;  // "the node you asked"
      Node* owner = &node(host, static_cast<int>(master->element[1]->integer));
      for (long long s = from->integer; s <= to->integer; ++s)
        slots[static_cast<std::size_t>(s)] = owner;
    }
    if (!ok) continue;
    slots_ = std::move(slots);
    map_stale_ = false;
    map_reads_.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  return Unexpected(last);
}

Expected<SyncReply, StoreError> RedisClusterStore::exchange(const SyncRequest& req) {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    return Unexpected(
        StoreError{StoreError::Kind::rejected,
                   "exchange() is already running on another thread: a RedisClusterStore serves "
                   "one exchange at a time (one Fleet's sync(); give each Fleet its own store)"});
  }
  return exchange_locked(req);
}

namespace {

// A redirect: "MOVED <slot> <host>:<port>" or "ASK ...".
bool redirect(const std::string& error, std::string_view kind, std::size_t& slot, std::string& host,
              int& port) {
  if (error.rfind(std::string(kind) + " ", 0) != 0) return false;
  const auto space = error.find(' ', kind.size() + 1);
  if (space == std::string::npos) return false;
  const std::string_view num(error.data() + kind.size() + 1, space - kind.size() - 1);
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), slot);
  if (ec != std::errc() || end != num.data() + num.size() || slot >= kSlots) return false;
  return split_address(std::string_view(error).substr(space + 1), host, port);
}

bool starts(const std::string& s, const char* word) { return s.rfind(word, 0) == 0; }

// An error reply of a node that does not serve the group now: the cluster reconfiguring,
// or a redirect not followed.
bool unavailable(const std::string& why) {
  std::size_t slot = 0;
  std::string host;
  int port = 0;
  return starts(why, "TRYAGAIN") || starts(why, "CLUSTERDOWN") || starts(why, "LOADING") ||
         starts(why, "MASTERDOWN") || starts(why, "READONLY") ||
         redirect(why, "MOVED", slot, host, port) || redirect(why, "ASK", slot, host, port);
}

}  // namespace

bool RedisClusterStore::read_wants_script(Call& c) {
  for (const ReplyPtr& r : c.reads) {
    // A redirect or a node not serving: exchange_locked() looks at it. Anything else (a
    // key of the wrong type): the script, which repairs it.
    if (r->type == REDIS_REPLY_ERROR) return !unavailable(text_of(r.get()));
  }
  const redisReply *seq = c.reads[0].get(), *id = c.reads[1].get(), *time = c.reads[2].get();
  std::uint64_t secs = 0, micros = 0;
  if (time->type != REDIS_REPLY_ARRAY || time->elements != 2 ||
      !parse_u64(time->element[0], secs) || !parse_u64(time->element[1], micros) ||
      secs > (std::uint64_t{1} << 40)) {
    c.error = StoreError{StoreError::Kind::protocol,
                         c.target->name + ": TIME did not return [seconds, microseconds]"};
    return false;
  }
  // Nothing to say: the counter is the cursor, the incarnation the one the script last
  // returned (checked before the read was sent: the same node and connection, the
  // heartbeat not due).
  const Group& grp = groups_[c.group];
  std::uint64_t at = 0;
  if (seq->type != REDIS_REPLY_STRING || !parse_u64(seq, at) || at != merge_.cursor(c.group) ||
      id->type != REDIS_REPLY_STRING || text_of(id) != grp.incarnation)
    return true;
  SyncReply sub;
  sub.incarnation = grp.incarnation;
  sub.sequence = at;
  sub.server_ms = static_cast<std::int64_t>(secs * 1000 + micros / 1000);
  c.quiet = std::move(sub);
  return false;
}

Expected<SyncReply, StoreError> RedisClusterStore::exchange_locked(const SyncRequest& req) {
  const SigpipeGuard no_sigpipe;
  const Deadline deadline =
      std::min(req.deadline, std::chrono::steady_clock::now() + config_.redis.timeout);
  request_ = &req;
  // The Fleet reads on from the sum of the group cursors this store last returned; any
  // other cursor (0 after a new incarnation) reads every group from the start.
  merge_.begin(req.cursor);
  if (config_.cluster && (map_stale_ || slots_.empty())) {
    auto m = read_map(deadline);
    if (!m && slots_.empty()) return Unexpected(m.error());
  }
  std::vector<Call> calls(groups_.size());
  for (std::size_t i = 0; i < req.ops.size(); ++i) {
    Call& c = calls[group_of(req.ops[i].key)];
    c.ops.push_back(&req.ops[i]);
    c.op_index.push_back(i);
  }
  std::vector<Call*> todo;
  Node* standalone = config_.cluster ? nullptr : &node(config_.redis.host, config_.redis.port);
  for (std::uint32_t g = 0; g < groups_.size(); ++g) {
    Call& c = calls[g];
    c.group = g;
    c.target = standalone != nullptr ? standalone : slots_[groups_[g].slot];
    // Nothing to send: the cheap read first, unless it could not find the group quiet
    // anyway (no script answered yet, another node or connection, the heartbeat due).
    const Group& grp = groups_[g];
    c.read = c.ops.empty() && !grp.incarnation.empty() && c.target != nullptr &&
             grp.script_node == c.target && c.target->ctx != nullptr &&
             grp.script_connection == c.target->connection && req.now_ms >= grp.script_ms &&
             req.now_ms - grp.script_ms < heartbeat_.count();
    if (c.target == nullptr) {
      c.error =
          StoreError{StoreError::Kind::unavailable, "slot " + std::to_string(groups_[g].slot) +
                                                        " is served by no node in the slot map"};
      map_stale_ = true;
      continue;
    }
    todo.push_back(&c);
  }
  // A first round for every group: the script, or the cheap read, followed on the same
  // node, as soon as that node answered, by the script for the groups whose read found
  // something to say (run()). Another round for the calls redirected (MOVED, ASK) or
  // whose node lost the script: each call is sent again at most once for either.
  auto redirected = [&](Call* c, const std::string& why, std::vector<Call*>& again) {
    std::size_t slot = 0;
    std::string host;
    int port = 0;
    const bool moved = redirect(why, "MOVED", slot, host, port);
    const bool ask = !moved && redirect(why, "ASK", slot, host, port);
    if (!(moved || ask) || !config_.cluster) return false;
    redirects_.fetch_add(1, std::memory_order_relaxed);
    Node& to = node(host, port);
    if (moved) {
      slots_[slot] = &to;
      map_stale_ = true;  // one slot moved: others may have too
    }
    c->target = &to;
    c->asking = ask;
    c->reply.reset();
    if (!c->resent) {
      c->resent = true;
      c->read = false;  // a group on the move: the script, which reads all it needs
      again.push_back(c);
    } else {
      c->error = StoreError{StoreError::Kind::unavailable, "redirected twice: " + why};
    }
    return true;
  };
  for (int round = 0; round < 3 && !todo.empty(); ++round) {
    run(todo, deadline);
    std::vector<Call*> again;
    for (Call* c : todo) {
      if (c->read) {
        // Answered by run() unless it failed: quiet, or an error reply to look at here
        // (a redirect, a node not serving).
        if (c->error || !c->answered || c->quiet) continue;
        for (const ReplyPtr& r : c->reads) {
          if (r->type != REDIS_REPLY_ERROR) continue;
          const std::string why = text_of(r.get());
          if (!redirected(c, why, again)) {
            c->error = StoreError{StoreError::Kind::unavailable, c->target->name + ": " + why};
            map_stale_ = config_.cluster;
          }
          break;
        }
        if (!c->error && c->read && !c->quiet && !c->resent) {
          c->error = StoreError{StoreError::Kind::protocol, "the group's read was not judged"};
        }
        continue;
      }
      if (!c->reply || c->reply->type != REDIS_REPLY_ERROR) continue;
      const std::string why = text_of(c->reply.get());
      if (redirected(c, why, again)) continue;
      if (starts(why, "NOSCRIPT") && !c->resent) {
        c->resent = true;
        c->eval = true;
        again.push_back(c);
      } else if (unavailable(why)) {
        c->reply.reset();
        c->error = StoreError{StoreError::Kind::unavailable, c->target->name + ": " + why};
        map_stale_ = config_.cluster;
      } else {
        c->reply.reset();
        c->error = StoreError{StoreError::Kind::rejected, "the fleet script failed: " + why};
      }
    }
    todo = std::move(again);
  }
  request_ = nullptr;

  // The groups' replies, checked.
  std::vector<std::optional<SyncReply>> subs(groups_.size());
  std::optional<StoreError> first_error;
  std::string partial;
  for (Call& c : calls) {
    if (!c.error && c.quiet) {
      subs[c.group] = std::move(*c.quiet);
    } else if (!c.error && c.reply) {
      auto sub = parse_script_reply(c.reply.get(), c.ops.size());
      if (sub) {
        std::size_t leases = 0, counts = 0, windows = 0;
        for (const FleetOp* op : c.ops) {
          leases += op->kind == FleetOp::Kind::lease;
          counts += op->kind == FleetOp::Kind::count;
          windows += op->kind == FleetOp::Kind::window;
        }
        if (sub->lease_holders.size() != leases || sub->counts.size() != counts ||
            sub->windows.size() != windows) {
          c.error = StoreError{StoreError::Kind::protocol,
                               "the fleet script returned lists that do not match the ops"};
        } else {
          Group& grp = groups_[c.group];
          grp.incarnation = sub->incarnation;
          grp.script_node = c.target;
          grp.script_connection = c.target->connection;
          grp.script_ms = req.now_ms;
          subs[c.group] = std::move(*sub);
        }
      } else {
        c.error = sub.error();
      }
    } else if (!c.error) {
      c.error = StoreError{StoreError::Kind::timeout, "no reply"};
    }
    if (c.error) {
      char name[16];
      std::snprintf(name, sizeof name, "group %02u", c.group);
      StoreError e{c.error->kind, std::string(name) + ": " + c.error->message};
      if (!first_error) first_error = e;
      if (!partial.empty()) partial += "; ";
      partial += e.message;
    }
  }
  if (std::none_of(subs.begin(), subs.end(), [](const auto& s) { return s.has_value(); }))
    return Unexpected(*first_error);

  std::vector<std::uint32_t> op_group(req.ops.size());
  for (std::size_t i = 0; i < req.ops.size(); ++i) op_group[i] = group_of(req.ops[i].key);
  return merge_.merge(req, subs, op_group, std::move(partial));
}

}  // namespace bulwark::redis
