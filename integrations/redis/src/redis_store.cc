#include "bulwark/redis/redis_store.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <memory>
#include <vector>

#include "bulwark/config_error.h"

namespace bulwark::redis {
namespace {

// KEYS[1]: <prefix>seq (so that a Cluster-aware proxy routes the script to its slot).
// ARGV: prefix, instance, now_ms (the sender's), quorum, quorum window ms (votes that
// old expire), vote_ttl_ms, cursor, op count, count bucket ms, count buckets, bucket ttl
// ms, max changes, window ttl ms, retention ms, idle ttl ms, then 5 per op: op, key,
// reason, until_ms (the sender's), lease_ms (a count op: op, key, successes, failures,
// 0; a window op: op, key, calls, failures, slow).
// Every time it keeps is the server's (TIME): an op's until_ms becomes the server's now
// plus until_ms - now_ms (at least 0, at most 2^50), votes, buckets and window levels
// are stamped with the server's now, and the staleness cutoffs are measured from it.
// Returns: incarnation, the server's now (Unix ms), sequence, lease count, the holders,
// count-op count, two totals per count op, window-op count, one
// "calls|failures|slow|instances" per window op, then key, value pairs.
// Every key it writes carries a TTL from the write on: k: records their open period plus
// the retention, v: l: w: fw: ft: their own, seq id changes the idle TTL (renewed by
// every exchange).
constexpr const char* kScript = R"lua(
local p, inst, now, quorum = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local quorum_window, vote_ttl, cursor, n = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local bucket_ms, nbuckets, bucket_ttl = tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11]
local max_changes, window_ttl = tonumber(ARGV[12]), tonumber(ARGV[13])
local retention, idle_ttl = tonumber(ARGV[14]), ARGV[15]
local seqk, chk, idk = KEYS[1], p .. 'changes', p .. 'id'
for j = 16, 16 + 5 * (n - 1), 5 do
  local op = ARGV[j]
  if op ~= 'open' and op ~= 'close' and op ~= 'assert' and op ~= 'count' and op ~= 'window' and
     op ~= 'wopen' and op ~= 'lease' then
    return redis.error_reply('unknown fleet op ' .. tostring(op))
  end
end
-- No counter: a store that starts again (new, flushed, or unused for the idle TTL) is a
-- new incarnation, which makes every instance read from the start and re-publish. The
-- counter goes on from the newest change left, so that no sequence is reused.
-- The incarnation names its creator, its clock and the server's (so it differs from the
-- one before it even when the same instance makes it at the same millisecond).
if redis.replicate_commands then redis.replicate_commands() end
-- The server's clock, the only one the fleet's times are kept in. Integers below 2^53
-- are exact in a Lua number; string.format('%d') writes them without an exponent.
local t = redis.call('TIME')
local snow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sender_now = tonumber(now)
local cutoff = string.format('%d', snow - quorum_window)
local bucket = 0
if nbuckets > 0 then bucket = math.floor(snow / bucket_ms) end
-- An op's until_ms in the server's clock: only the remaining time is the sender's.
local function until_of(u)
  return snow + math.min(math.max(tonumber(u) - sender_now, 0), 2 ^ 50)
end
local function incarnation()
  return inst .. '@' .. now .. '@' .. t[1] .. '.' .. t[2]
end
if redis.call('EXISTS', seqk) == 0 then
  local last = redis.call('ZRANGE', chk, -1, -1, 'WITHSCORES')
  redis.call('SET', seqk, last[2] or '0', 'PX', idle_ttl)
  redis.call('SET', idk, incarnation(), 'PX', idle_ttl)
elseif redis.call('EXISTS', idk) == 0 then
  redis.call('SET', idk, incarnation(), 'PX', idle_ttl)
end
local function get(k)
  local v = redis.pcall('GET', k)
  if type(v) ~= 'string' then return nil end
  return v
end
local function current(k)
  local v = get(k)
  if not v then return nil, 0 end
  local st, u = string.match(v, '^v1|(%a+)|[%w_]+|(%d+)|[^|]+|%d+$')
  if not st then st, u = string.match(v, '^v1|(%a+)|[%w_]+|(%d+)|[^|]+|%d+|window$') end
  return st, tonumber(u or '0')
end
local function record(key, st, reason, u, suffix)
  local e = redis.call('INCR', seqk)
  -- Kept for the open period and the retention after it; a closed one for the retention.
  local ttl = retention
  if st == 'open' then ttl = ttl + math.min(math.max(u - snow, 0), 2 ^ 50) end
  redis.call('SET', p .. 'k:' .. key, 'v1|' .. st .. '|' .. reason .. '|' ..
             string.format('%d', u) .. '|' .. inst ..
             '|' .. tostring(e) .. (suffix or ''), 'PX', string.format('%d', ttl))
  redis.call('ZADD', chk, e, key)
  redis.call('PEXPIRE', chk, idle_ttl)
end
local leases, counts, windows = {}, {}, {}
-- One instance's window level: "calls|failures|slow|ms", each at most 15 digits.
local function level(v)
  local c, f, s, ms = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)$')
  if not c or #c > 15 or #f > 15 or #s > 15 or #ms > 15 then return nil end
  return tonumber(c), tonumber(f), tonumber(s), tonumber(ms)
end
-- Sums one outcome over the window's buckets; 'malformed' if a bucket holds anything
-- but a decimal count.
local function total(key, field)
  local sum = 0
  for b = bucket - nbuckets + 1, bucket do
    local v = redis.pcall('HGET', p .. 'w:' .. key .. ':' .. string.format('%d', b), field)
    if type(v) == 'table' or (v and not string.match(v, '^%d+$')) then return 'malformed' end
    if v then sum = sum + tonumber(v) end
  end
  return string.format('%d', sum)
end
local i = 16
for _ = 1, n do
  local op, key, reason, u, lease = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  local rk, lk, vk = p .. 'k:' .. key, p .. 'l:' .. key, p .. 'v:' .. key
  if op == 'open' then
    u = until_of(u)
    redis.call('ZADD', vk, string.format('%d', snow), inst)
    redis.call('ZREMRANGEBYSCORE', vk, '-inf', cutoff)
    redis.call('PEXPIRE', vk, vote_ttl)
    local st, cu = current(rk)
    local q = get(lk) == inst or redis.call('ZCARD', vk) >= quorum
    if q and not (st == 'open' and cu >= u) then
      record(key, 'open', reason, u)
      redis.call('DEL', lk)
    end
  elseif op == 'close' then
    if current(rk) == 'open' then record(key, 'closed', reason, 0) end
    redis.call('DEL', lk, vk)
  elseif op == 'assert' then
    -- Also when the record outlived the changes set (a long open period): unlisted, no
    -- instance would read it.
    if redis.call('EXISTS', rk) == 0 or not redis.call('ZSCORE', chk, key) then
      record(key, 'open', reason, until_of(u))
    end
  elseif op == 'count' then
    if nbuckets > 0 then
      local wk = p .. 'w:' .. key .. ':' .. string.format('%d', bucket)
      if reason ~= '0' then redis.pcall('HINCRBY', wk, 's', reason) end
      if u ~= '0' then redis.pcall('HINCRBY', wk, 'f', u) end
      redis.call('PEXPIRE', wk, bucket_ttl)
      counts[#counts + 1] = total(key, 's')
      counts[#counts + 1] = total(key, 'f')
    else
      counts[#counts + 1] = '0'
      counts[#counts + 1] = '0'
    end
  elseif op == 'window' then
    -- fw:<key>: instance -> "calls|failures|slow|ms", and '=' -> the running sum
    -- "calls|failures|slow|entries"; ft:<key>: instance -> ms, to find the stale ones.
    -- Each op costs O(log entries + expired ones); the full re-sum runs only when the
    -- sum disagrees with the hash (a first write, a planted or unreadable entry).
    local fk, tk = p .. 'fw:' .. key, p .. 'ft:' .. key
    local cutoff = snow - window_ttl
    local bad, again = nil, false
    local c, f, s, k
    local sum = redis.pcall('HGET', fk, '=')
    if type(sum) == 'table' then
      bad = 'malformed|' .. inst .. '=(not a hash)'
      redis.call('DEL', fk, tk)
      sum = nil
    end
    if sum then
      c, f, s, k = level(sum)
      if not c then bad = 'malformed|==' .. sum end
    end
    local tt = redis.call('TYPE', tk).ok
    if not c or redis.call('HLEN', fk) ~= k + 1 or (tt ~= 'zset' and not (tt == 'none' and k == 0)) then
      again = true
      c, f, s, k = 0, 0, 0, 0
    else
      for _, who in ipairs(redis.call('ZRANGEBYSCORE', tk, '-inf', cutoff)) do
        local lc, lf, ls = level(redis.call('HGET', fk, who) or '')
        if lc then
          c, f, s, k = c - lc, f - lf, s - ls, k - 1
        else
          again = true
        end
        redis.call('HDEL', fk, who)
        redis.call('ZREM', tk, who)
      end
      local old = redis.call('HGET', fk, inst)
      if old then
        local lc, lf, ls = level(old)
        if lc then
          c, f, s, k = c - lc, f - lf, s - ls, k - 1
        else
          again = true
        end
      end
    end
    if reason == '0' then
      redis.call('HDEL', fk, inst)
      redis.pcall('ZREM', tk, inst)
    else
      local stamp = string.format('%d', snow)
      redis.call('HSET', fk, inst, reason .. '|' .. u .. '|' .. lease .. '|' .. stamp)
      redis.pcall('ZADD', tk, stamp, inst)
      c, f, s, k = c + tonumber(reason), f + tonumber(u), s + tonumber(lease), k + 1
    end
    if again or c < 0 or f < 0 or s < 0 or k < 0 or f > c or s > c then
      -- Re-sum every entry: the readable fresh ones count, the others are dropped.
      redis.call('DEL', tk)
      redis.call('HDEL', fk, '=')
      local all = redis.call('HGETALL', fk)
      c, f, s, k = 0, 0, 0, 0
      for j = 1, #all, 2 do
        local lc, lf, ls, lms = level(all[j + 1])
        if not lc then
          bad = bad or ('malformed|' .. all[j] .. '=' .. all[j + 1])
          redis.call('HDEL', fk, all[j])
        elseif lms <= cutoff then
          redis.call('HDEL', fk, all[j])
        else
          c, f, s, k = c + lc, f + lf, s + ls, k + 1
          redis.call('ZADD', tk, lms, all[j])
        end
      end
    end
    if k == 0 then
      redis.call('DEL', fk, tk)
    else
      redis.call('HSET', fk, '=', string.format('%d|%d|%d|%d', c, f, s, k))
      redis.call('PEXPIRE', fk, window_ttl)
      redis.call('PEXPIRE', tk, window_ttl)
    end
    windows[#windows + 1] = bad or string.format('%d|%d|%d|%d', c, f, s, k)
  elseif op == 'wopen' then
    local st, cu = current(rk)
    u = until_of(u)
    if not (st == 'open' and cu >= u) then
      record(key, 'open', reason, u, '|window')
      redis.call('DEL', lk)
    end
  elseif op == 'lease' then
    redis.call('SET', lk, inst, 'NX', 'PX', lease)
    leases[#leases + 1] = get(lk) or ''
  end
end
-- The oldest few changes whose record expired leave the set (bounded work per exchange;
-- the set holds one entry per key at most).
for _, key in ipairs(redis.call('ZRANGE', chk, 0, 7)) do
  if redis.call('EXISTS', p .. 'k:' .. key) == 0 then redis.call('ZREM', chk, key) end
end
redis.call('PEXPIRE', seqk, idle_ttl)
redis.call('PEXPIRE', idk, idle_ttl)
redis.call('PEXPIRE', chk, idle_ttl)
local seq = redis.call('GET', seqk) or '0'
local changed = redis.call('ZRANGEBYSCORE', chk, '(' .. cursor, '+inf', 'WITHSCORES', 'LIMIT', 0,
                           max_changes)
-- Cut short: the next exchange reads on from the last change returned.
if #changed / 2 >= max_changes then seq = changed[#changed] end
local out = {redis.call('GET', p .. 'id') or '', string.format('%d', snow), tostring(seq),
             tostring(#leases)}
for _, h in ipairs(leases) do out[#out + 1] = h end
out[#out + 1] = tostring(#counts / 2)
for _, c in ipairs(counts) do out[#out + 1] = c end
out[#out + 1] = tostring(#windows)
for _, w in ipairs(windows) do out[#out + 1] = w end
for j = 1, #changed, 2 do
  local key = changed[j]
  local v = redis.pcall('GET', p .. 'k:' .. key)
  if type(v) == 'table' then v = '(not a string)' end
  if v then
    out[#out + 1] = key
    out[#out + 1] = v
  else
    -- The record expired: the same as none, the key is closed for the fleet.
    redis.call('ZREM', chk, key)
  end
end
return out
)lua";

// hiredis writes with write(2): to a server that went away that raises SIGPIPE, whose
// default action ends the process. While alive, this blocks SIGPIPE on this thread and
// discards one that the writes raised, leaving the application's handling untouched.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeGuard() {
    if (!blocked_) return;
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string reply_text(const redisReply* r) { return std::string(r->str, r->len); }

[[noreturn]] void bad(std::string field, std::string message) {
  detail::raise_config_error(
      ConfigError{"redis fleet store", std::move(field), std::move(message)});
}

bool parse_u64(const redisReply* r, std::uint64_t& out) {
  if (r->type != REDIS_REPLY_STRING || r->len == 0) return false;
  const auto [p, ec] = std::from_chars(r->str, r->str + r->len, out);
  return ec == std::errc() && p == r->str + r->len;
}

const char* op_name(FleetOp::Kind k) {
  switch (k) {
    case FleetOp::Kind::vote_open:
      return "open";
    case FleetOp::Kind::close:
      return "close";
    case FleetOp::Kind::assert_open:
      return "assert";
    case FleetOp::Kind::lease:
      return "lease";
    case FleetOp::Kind::count:
      return "count";
    case FleetOp::Kind::window:
      return "window";
    case FleetOp::Kind::window_open:
      return "wopen";
  }
  return "?";
}

}  // namespace

const char* RedisFleetStore::script() noexcept { return kScript; }

RedisFleetStore::RedisFleetStore(RedisConfig config)
    : config_(std::move(config)), rng_(std::random_device{}()) {
  if (config_.host.empty()) bad("host", "must not be empty");
  if (config_.port <= 0 || config_.port > 65535)
    bad("port", "must be in 1..65535, got " + std::to_string(config_.port));
  if (config_.prefix.empty()) bad("prefix", "must not be empty");
  for (char c : config_.prefix) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      bad("prefix", "must not contain spaces or control characters");
  }
  {
    // Redis Cluster hashes only what lies between the first '{' and the next '}'.
    const auto open = config_.prefix.find('{');
    const auto close = open == std::string::npos ? open : config_.prefix.find('}', open + 1);
    if (close == std::string::npos)
      bad("prefix",
          "must contain a hash tag {...} (\"" + config_.prefix +
              "\" has none), so that all of the fleet's keys share one Redis Cluster slot");
    if (close == open + 1)
      bad("prefix", "has an empty hash tag {} (\"" + config_.prefix +
                        "\"): Redis Cluster would hash each whole key, scattering the fleet's "
                        "keys over slots");
  }
  if (config_.connect_timeout <= std::chrono::milliseconds::zero())
    bad("connect_timeout", "must be positive");
  if (config_.command_timeout <= std::chrono::milliseconds::zero())
    bad("command_timeout", "must be positive");
  if (config_.reconnect_min <= std::chrono::milliseconds::zero())
    bad("reconnect_min", "must be positive");
  if (config_.retention <= std::chrono::milliseconds::zero()) bad("retention", "must be positive");
  if (config_.idle_ttl < config_.retention) bad("idle_ttl", "must be at least retention");
  if (config_.reconnect_max < config_.reconnect_min)
    bad("reconnect_max", "must be at least reconnect_min");
  if (config_.password.empty() && !config_.username.empty())
    bad("password", "must be set when username is");
}

RedisFleetStore::~RedisFleetStore() {
  if (ctx_ != nullptr) redisFree(ctx_);
}

StoreError RedisFleetStore::fail(StoreError e) {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  // Exponential backoff with jitter: a uniform draw in [cap/2, cap].
  const std::int64_t base = config_.reconnect_min.count();
  const std::int64_t cap = std::min<std::int64_t>(config_.reconnect_max.count(),
                                                  base << std::min<std::uint32_t>(failures_, 20));
  ++failures_;
  std::uniform_int_distribution<std::int64_t> jitter(cap / 2, cap);
  next_attempt_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(jitter(rng_));
  return e;
}

Expected<void, StoreError> RedisFleetStore::connect() {
  redisContext* c = redisConnectWithTimeout(config_.host.c_str(), config_.port,
                                            to_timeval(config_.connect_timeout));
  if (c == nullptr) return Unexpected(fail({StoreError::Kind::unavailable, "out of memory"}));
  ctx_ = c;
  if (c->err != 0) {
    const std::string why = c->errstr;
    return Unexpected(
        fail({StoreError::Kind::unavailable,
              "connecting to " + config_.host + ":" + std::to_string(config_.port) + ": " + why}));
  }
  if (redisSetTimeout(c, to_timeval(config_.command_timeout)) != REDIS_OK)
    return Unexpected(fail({StoreError::Kind::unavailable, "setting the command timeout"}));
  // AUTH and SCRIPT LOAD in one round trip.
  int expected = 1;
  if (!config_.password.empty()) {
    if (config_.username.empty()) {
      const char* argv[] = {"AUTH", config_.password.c_str()};
      const size_t len[] = {4, config_.password.size()};
      redisAppendCommandArgv(c, 2, argv, len);
    } else {
      const char* argv[] = {"AUTH", config_.username.c_str(), config_.password.c_str()};
      const size_t len[] = {4, config_.username.size(), config_.password.size()};
      redisAppendCommandArgv(c, 3, argv, len);
    }
    ++expected;
  }
  {
    const char* argv[] = {"SCRIPT", "LOAD", kScript};
    const size_t len[] = {6, 4, std::char_traits<char>::length(kScript)};
    redisAppendCommandArgv(c, 3, argv, len);
  }
  for (int i = 0; i < expected; ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) {
      const bool timeout = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
      const std::string why = c->errstr;
      return Unexpected(fail({timeout ? StoreError::Kind::timeout : StoreError::Kind::unavailable,
                              "setting up the connection: " + why}));
    }
    ReplyPtr r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR) {
      const bool auth = i == 0 && expected == 2;
      return Unexpected(
          fail({StoreError::Kind::rejected,
                std::string(auth ? "AUTH" : "SCRIPT LOAD") + " refused: " + reply_text(r.get())}));
    }
    if (i == expected - 1) {
      if (r->type != REDIS_REPLY_STRING)
        return Unexpected(fail({StoreError::Kind::protocol, "SCRIPT LOAD did not return a hash"}));
      sha_ = reply_text(r.get());
    }
  }
  ++connects_;
  return {};
}

Expected<SyncReply, StoreError> RedisFleetStore::exchange(const SyncRequest& req) {
  const SigpipeGuard no_sigpipe;
  if (ctx_ == nullptr) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_attempt_) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt_ - now).count();
      return Unexpected(
          StoreError{StoreError::Kind::unavailable,
                     "not connected; next attempt in " + std::to_string(wait) + " ms"});
    }
    auto ok = connect();
    if (!ok) return Unexpected(ok.error());
  }
  std::vector<std::string> args;
  args.reserve(20 + 5 * req.ops.size());
  args.push_back("EVALSHA");
  args.push_back(sha_);
  args.push_back("1");
  args.push_back(config_.prefix + "seq");
  args.push_back(config_.prefix);
  args.push_back(req.instance);
  args.push_back(std::to_string(req.now_ms));
  args.push_back(std::to_string(req.quorum));
  args.push_back(std::to_string(req.quorum_window_ms));
  args.push_back(std::to_string(2 * req.quorum_window_ms));
  args.push_back(std::to_string(req.cursor));
  args.push_back(std::to_string(req.ops.size()));
  const bool counting = req.count_bucket_ms > 0 && req.count_buckets > 0;
  args.push_back(std::to_string(counting ? req.count_bucket_ms : 0));
  args.push_back(std::to_string(counting ? req.count_buckets : 0));
  args.push_back(std::to_string(counting ? req.count_bucket_ms * (req.count_buckets + 1) : 1));
  args.push_back(std::to_string(std::max<std::uint32_t>(req.max_changes, 1)));
  args.push_back(std::to_string(std::max<std::int64_t>(req.window_ttl_ms, 1)));
  args.push_back(std::to_string(config_.retention.count()));
  args.push_back(std::to_string(config_.idle_ttl.count()));
  for (const FleetOp& op : req.ops) {
    args.push_back(op_name(op.kind));
    args.push_back(op.key);
    if (op.kind == FleetOp::Kind::count) {
      args.push_back(std::to_string(op.successes));
      args.push_back(std::to_string(op.failures));
    } else if (op.kind == FleetOp::Kind::window) {
      args.push_back(std::to_string(op.calls));
      args.push_back(std::to_string(op.failures));
      args.push_back(std::to_string(op.slow));
      continue;
    } else {
      args.push_back(std::string(to_string(op.reason)));
      args.push_back(std::to_string(op.until_ms));
    }
    args.push_back(std::to_string(op.lease_ms));
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  void* raw = redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (raw == nullptr) {
    const bool timeout = ctx_->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    const std::string why = ctx_->errstr;
    return Unexpected(fail(
        {timeout ? StoreError::Kind::timeout : StoreError::Kind::unavailable, "EVALSHA: " + why}));
  }
  ReplyPtr r(static_cast<redisReply*>(raw));
  if (r->type == REDIS_REPLY_ERROR) {
    const std::string why = reply_text(r.get());
    // A server that lost its scripts (SCRIPT FLUSH, a failover) loads it again next time.
    if (why.rfind("NOSCRIPT", 0) == 0)
      return Unexpected(fail({StoreError::Kind::rejected, "the script is gone: " + why}));
    failures_ = 0;
    return Unexpected(StoreError{StoreError::Kind::rejected, "the fleet script failed: " + why});
  }
  failures_ = 0;
  auto protocol = [](std::string what) {
    return Unexpected(StoreError{StoreError::Kind::protocol, "the fleet script returned " + what});
  };
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 4)
    return protocol("something else than its array");
  for (size_t i = 0; i < r->elements; ++i) {
    if (r->element[i]->type != REDIS_REPLY_STRING) return protocol("a non-string element");
  }
  SyncReply out;
  out.incarnation = reply_text(r->element[0]);
  // The server's time goes to the Fleet as read, 0 if it is not a number: the Fleet
  // refuses such a reply and says why.
  std::uint64_t server_ms = 0;
  if (parse_u64(r->element[1], server_ms) && server_ms <= (std::uint64_t{1} << 53))
    out.server_ms = static_cast<std::int64_t>(server_ms);
  std::uint64_t leases = 0;
  if (!parse_u64(r->element[2], out.sequence)) return protocol("a sequence that is not a number");
  if (!parse_u64(r->element[3], leases) || leases > r->elements - 4)
    return protocol("a bad lease count");
  for (size_t i = 0; i < leases; ++i) out.lease_holders.push_back(reply_text(r->element[4 + i]));
  std::uint64_t counts = 0;
  if (4 + leases >= r->elements || !parse_u64(r->element[4 + leases], counts) ||
      counts > (r->elements - 5 - leases) / 2)
    return protocol("a bad count of counts");
  for (size_t i = 0; i < counts; ++i) {
    out.counts.push_back(
        {reply_text(r->element[5 + leases + 2 * i]), reply_text(r->element[6 + leases + 2 * i])});
  }
  const size_t at_windows = 5 + leases + 2 * counts;
  std::uint64_t windows = 0;
  if (at_windows >= r->elements || !parse_u64(r->element[at_windows], windows) ||
      windows > r->elements - 1 - at_windows)
    return protocol("a bad count of windows");
  for (size_t i = 0; i < windows; ++i)
    out.windows.push_back(reply_text(r->element[at_windows + 1 + i]));
  const size_t first = at_windows + 1 + windows;
  if ((r->elements - first) % 2 != 0) return protocol("an odd number of key/value elements");
  out.changes.reserve((r->elements - first) / 2);
  for (size_t i = first; i < r->elements; i += 2) {
    out.changes.push_back(RawRecord{reply_text(r->element[i]), reply_text(r->element[i + 1])});
  }
  return out;
}

}  // namespace bulwark::redis
