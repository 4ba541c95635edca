#include "bulwark/redis/redis_store.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <memory>
#include <vector>

#include "bulwark/config_error.h"
#include "redis_wire.h"

namespace bulwark::redis {
namespace wire {

// KEYS[1]: <prefix>seq (so that a Cluster-aware proxy routes the script to its slot).
// ARGV: prefix, instance, now_ms (the sender's), quorum, quorum window ms (votes that
// old expire), vote_ttl_ms, cursor, op count, count bucket ms, count buckets, bucket ttl
// ms, max changes, window ttl ms, retention ms, idle ttl ms, then 5 per op: op, key,
// reason, until_ms (the sender's), and a fifth: open and wopen the sender's longest
// open period (0: none), assert the sequence of the record the sender holds, lease the
// lease ms (a count op: op, key, successes, failures, 0; a window op: op, key, calls,
// failures, slow).
// Every time it keeps is the server's (TIME): an op's until_ms becomes the server's now
// plus until_ms - now_ms (at least 0, at most 2^50), votes, buckets and window levels
// are stamped with the server's now, and the staleness cutoffs are measured from it.
// Every key is checked before it is used (type, and a value it can read); what is
// corrupt is replaced or removed, and each repair is reported.
// Returns: incarnation, the server's now (Unix ms), sequence, lease count, the holders,
// count-op count, two totals per count op, window-op count, one
// "calls|failures|slow|instances" per window op, op count, the sequence each op wrote
// (0: none), repair count, one line per repair, then key, value pairs.
// Every key it writes carries a TTL from the write on: k: records their open period plus
// the retention, v: l: w: fw: ft: their own, seq id run changes the idle TTL (renewed by
// every exchange).
constexpr const char* kScript = R"lua(
local p, inst, now, quorum = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local quorum_window, vote_ttl, cursor, n = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local bucket_ms, nbuckets, bucket_ttl = tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11]
local max_changes, window_ttl = tonumber(ARGV[12]), tonumber(ARGV[13])
local retention, idle_ttl = tonumber(ARGV[14]), ARGV[15]
local seqk, chk, idk, runk = KEYS[1], p .. 'changes', p .. 'id', p .. 'run'
local known_ops = {open = 1, close = 1, assert = 1, assertw = 1, count = 1, window = 1,
                   wopen = 1, lease = 1}
for j = 16, 16 + 5 * (n - 1), 5 do
  if not known_ops[ARGV[j]] then
    return redis.error_reply('unknown fleet op ' .. tostring(ARGV[j]))
  end
end
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

-- Repairs: what was corrupt, named, for the reply.
local repairs = {}
local function shown(v)
  v = tostring(v)
  local s = string.gsub(string.sub(v, 1, 40), '[^%w%p ]', '?')
  if #v > 40 then s = s .. '...' end
  return "'" .. s .. "'"
end
local function kind(k)
  return redis.call('TYPE', k).ok
end
-- What a corrupt key held: its value if it is a string, else its type.
local function held(k, v)
  if type(v) == 'string' then return shown(v) end
  return 'a ' .. kind(k)
end
local function repaired(k, what, done)
  repairs[#repairs + 1] = string.sub(k, #p + 1, #p + 120) .. ' held ' .. what .. ': ' .. done
end
-- A counter: 1 to 15 digits, below 2^50.
local function counter(v)
  if type(v) ~= 'string' or #v > 15 or not string.match(v, '^%d+$') then return nil end
  local x = tonumber(v)
  if x >= 2 ^ 50 then return nil end
  return x
end
local function valid_id(v)
  return type(v) == 'string' and #v >= 1 and #v <= 64 and string.match(v, '^[%w%._:%-]+$') ~= nil
end
-- A key that must be of type `want` (or absent): removed if it is not.
local function typed(k, want)
  local ty = kind(k)
  if ty == 'none' or ty == want then return true end
  repaired(k, 'a ' .. ty .. ', not a ' .. want, 'removed')
  redis.call('DEL', k)
  return false
end

-- The store's own keys. A changes set or a counter that cannot be read is replaced, and
-- a replaced counter (or another Redis process: a restart, empty or from a snapshot, a
-- failover) starts a new incarnation, which makes every instance read from the start
-- and re-publish what it holds open. The counter goes on from the newest change left,
-- so that no sequence is reused. The incarnation names its creator, its clock and the
-- server's (so it differs from the one before it even when the same instance makes it
-- at the same millisecond).
local fresh = false
if not typed(chk, 'zset') then fresh = true end
if kind(seqk) ~= 'none' then
  local v = redis.pcall('GET', seqk)
  if not counter(v) then
    repaired(seqk, held(seqk, v) .. ', not a counter below 2^50', 'a new counter and incarnation')
    redis.call('DEL', seqk)
  end
end
if kind(idk) ~= 'none' then
  local v = redis.pcall('GET', idk)
  if type(v) ~= 'string' or #v > 200 then
    repaired(idk, held(idk, v) .. ', not an incarnation', 'a new incarnation')
    redis.call('DEL', idk)
  end
end
typed(runk, 'string')
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
if redis.call('EXISTS', seqk) == 0 then
  local last = redis.call('ZRANGE', chk, -1, -1, 'WITHSCORES')
  local from = 0
  if last[2] then
    from = counter(last[2])
    if not from then
      repaired(chk, 'the score ' .. shown(last[2]) .. ', not a sequence', 'removed')
      redis.call('DEL', chk)
      from = 0
    end
  end
  redis.call('SET', seqk, string.format('%d', from), 'PX', idle_ttl)
  fresh = true
end
if fresh or redis.call('EXISTS', idk) == 0 or redis.call('GET', runk) ~= run then
  redis.call('SET', idk, inst .. '@' .. now .. '@' .. t[1] .. '.' .. t[2], 'PX', idle_ttl)
  redis.call('SET', runk, run, 'PX', idle_ttl)
end
local seq = tonumber(redis.call('GET', seqk))
-- Changes past the counter (or not positive) cannot be a decision of this counter's.
for _, range in ipairs({{'(' .. string.format('%d', seq), '+inf'}, {'-inf', '(1'}}) do
  local gone = redis.call('ZREMRANGEBYSCORE', chk, range[1], range[2])
  if gone > 0 then
    repaired(chk, string.format('%d', gone) .. ' entries outside 1..' .. string.format('%d', seq),
             'removed')
  end
end

local reasons = {consecutive_failures = 1, failure_rate = 1, slow_call_rate = 1,
                 open_period_elapsed = 1, probes_succeeded = 1, probe_failed = 1, manual = 1,
                 fleet_opened = 1, fleet_closed = 1}
-- A record as the Fleet's decode_record() reads it: state and end, nil if it is not one.
local function parse(v)
  if type(v) ~= 'string' then return nil end
  local st, r, u, who, q, w = string.match(v, '^v1|(%l+)|([%l_]+)|(%d+)|([^|]+)|(%d+)(.*)$')
  if not st or (st ~= 'open' and st ~= 'closed') or not reasons[r] or #u > 18 or
     not valid_id(who) or #q > 15 or tonumber(q) == 0 or (w ~= '' and w ~= '|window') then
    return nil
  end
  local until_ms = tonumber(u)
  if (st == 'open') ~= (until_ms > 0) then return nil end
  if w ~= '' and (st ~= 'open' or (r ~= 'failure_rate' and r ~= 'slow_call_rate')) then
    return nil
  end
  return st, until_ms
end
-- The record of `key`: state, end and value, or nothing. One that is not a record is
-- removed (and its change with it): the key is closed for the fleet.
local function current(key)
  local rk = p .. 'k:' .. key
  local v = redis.pcall('GET', rk)
  if not v then return nil, 0 end
  local st, u = parse(v)
  if not st then
    repaired(rk, held(rk, v) .. ', not a fleet record', 'removed')
    redis.call('DEL', rk)
    redis.call('ZREM', chk, key)
    return nil, 0
  end
  return st, u, v
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
  return e
end
-- The lease holder of `key`, or nil. A lease that is not a string naming an instance,
-- or that never expires (or expires later than `longest` ms from now, when given), is
-- removed: a holder that does not exist would keep every instance waiting.
local function holder(lk, longest)
  local v = redis.pcall('GET', lk)
  if not v then return nil end
  local ttl = redis.call('PTTL', lk)
  if not valid_id(v) or ttl < 0 or (longest and ttl > longest) then
    repaired(lk, held(lk, v) .. ' expiring in ' .. string.format('%d', ttl) .. ' ms, not a lease',
             'removed')
    redis.call('DEL', lk)
    return nil
  end
  return v
end
-- Votes: a sorted set of instance ids by the server's ms. Votes stamped in the future
-- (planted, or a server clock that stepped back) and members that are not instance ids
-- are removed.
local function votes(vk)
  if not typed(vk, 'zset') then return 0 end
  local late = redis.call('ZREMRANGEBYSCORE', vk, '(' .. string.format('%d', snow), '+inf')
  if late > 0 then repaired(vk, string.format('%d', late) .. ' votes from the future', 'removed') end
  if quorum <= 1 then return redis.call('ZCARD', vk) end
  local count = 0
  for _, who in ipairs(redis.call('ZRANGE', vk, 0, -1)) do
    if valid_id(who) then
      count = count + 1
    else
      repaired(vk, 'the vote ' .. shown(who) .. ', not an instance id', 'removed')
      redis.call('ZREM', vk, who)
    end
  end
  return count
end
-- An open the sender would not adopt: it ends later than the sender's longest open
-- period from now. The sender's own open replaces it.
local function too_long(cu, longest)
  longest = tonumber(longest)
  return longest > 0 and cu - snow > longest
end
local leases, counts, windows, written = {}, {}, {}, {}
-- One instance's window level: "calls|failures|slow|ms", each at most 15 digits, no more
-- failures or slow calls than calls, not stamped in the future.
local function level(v)
  local c, f, s, ms = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)$')
  if not c or #c > 15 or #f > 15 or #s > 15 or #ms > 15 then return nil end
  c, f, s, ms = tonumber(c), tonumber(f), tonumber(s), tonumber(ms)
  if f > c or s > c or ms > snow then return nil end
  return c, f, s, ms
end
-- One count bucket, checked: a hash whose s and f are counters, or it is removed.
local function bucket_ok(wk)
  if not typed(wk, 'hash') then return false end
  for _, field in ipairs({'s', 'f'}) do
    local v = redis.call('HGET', wk, field)
    if v and not counter(v) then
      repaired(wk, 'the count ' .. field .. '=' .. shown(v), 'the bucket removed')
      redis.call('DEL', wk)
      return false
    end
  end
  return true
end
-- Sums one outcome over the window's buckets (checked above).
local function total(key, field)
  local sum = 0
  for b = bucket - nbuckets + 1, bucket do
    local v = redis.call('HGET', p .. 'w:' .. key .. ':' .. string.format('%d', b), field)
    if v then sum = sum + tonumber(v) end
  end
  return string.format('%d', sum)
end
local i = 16
for _ = 1, n do
  local op, key, reason, u, extra = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  local rk, lk, vk = p .. 'k:' .. key, p .. 'l:' .. key, p .. 'v:' .. key
  local wrote = 0
  if op == 'open' then
    u = until_of(u)
    votes(vk)
    redis.call('ZADD', vk, string.format('%d', snow), inst)
    redis.call('ZREMRANGEBYSCORE', vk, '-inf', cutoff)
    redis.call('PEXPIRE', vk, vote_ttl)
    local st, cu = current(key)
    local q = holder(lk) == inst or votes(vk) >= quorum
    if q and not (st == 'open' and cu >= u and not too_long(cu, extra)) then
      wrote = record(key, 'open', reason, u)
      redis.call('DEL', lk)
    end
  elseif op == 'close' then
    if current(key) == 'open' then wrote = record(key, 'closed', reason, 0) end
    redis.call('DEL', lk, vk)
  elseif op == 'assert' or op == 'assertw' then
    -- The sender holds the key open: recorded again if the record is gone (an eviction,
    -- a restart) and no newer decision was made since the one the sender holds, or if
    -- it outlived the changes set (a long open period): unlisted, no instance would read it.
    local st = current(key)
    local listed = redis.call('ZSCORE', chk, key)
    if (not st and (not listed or tonumber(listed) <= tonumber(extra))) or (st and not listed) then
      wrote = record(key, 'open', reason, until_of(u), op == 'assertw' and '|window' or nil)
    end
  elseif op == 'count' then
    if nbuckets > 0 then
      local wk = p .. 'w:' .. key .. ':' .. string.format('%d', bucket)
      bucket_ok(wk)
      if reason ~= '0' then redis.call('HINCRBY', wk, 's', reason) end
      if u ~= '0' then redis.call('HINCRBY', wk, 'f', u) end
      redis.call('PEXPIRE', wk, bucket_ttl)
      for b = bucket - nbuckets + 1, bucket - 1 do
        bucket_ok(p .. 'w:' .. key .. ':' .. string.format('%d', b))
      end
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
      c, f, s, k = string.match(sum, '^(%d+)|(%d+)|(%d+)|(%d+)$')
      if not c or #c > 15 or #f > 15 or #s > 15 or #k > 15 then
        c = nil
        bad = 'malformed|==' .. sum
      else
        c, f, s, k = tonumber(c), tonumber(f), tonumber(s), tonumber(k)
      end
    end
    local tt = kind(tk)
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
      if kind(tk) == 'zset' then redis.call('ZREM', tk, inst) end
    else
      local stamp = string.format('%d', snow)
      redis.call('HSET', fk, inst, reason .. '|' .. u .. '|' .. extra .. '|' .. stamp)
      if kind(tk) == 'zset' or kind(tk) == 'none' then redis.call('ZADD', tk, stamp, inst) end
      c, f, s, k = c + tonumber(reason), f + tonumber(u), s + tonumber(extra), k + 1
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
    local st, cu = current(key)
    u = until_of(u)
    if not (st == 'open' and cu >= u and not too_long(cu, extra)) then
      wrote = record(key, 'open', reason, u, '|window')
      redis.call('DEL', lk)
    end
  elseif op == 'lease' then
    holder(lk, 2 * tonumber(extra))
    redis.call('SET', lk, inst, 'NX', 'PX', extra)
    leases[#leases + 1] = holder(lk) or ''
  end
  written[#written + 1] = tostring(wrote)
end
-- The oldest few changes whose record expired leave the set (bounded work per exchange;
-- the set holds one entry per key at most).
for _, key in ipairs(redis.call('ZRANGE', chk, 0, 7)) do
  if redis.call('EXISTS', p .. 'k:' .. key) == 0 then redis.call('ZREM', chk, key) end
end
redis.call('PEXPIRE', seqk, idle_ttl)
redis.call('PEXPIRE', idk, idle_ttl)
redis.call('PEXPIRE', runk, idle_ttl)
redis.call('PEXPIRE', chk, idle_ttl)
local last = redis.call('GET', seqk)
local changed = redis.call('ZRANGEBYSCORE', chk, '(' .. cursor, '+inf', 'WITHSCORES', 'LIMIT', 0,
                           max_changes)
-- Cut short: the next exchange reads on from the last change returned.
if #changed / 2 >= max_changes then
  last = string.format('%d', math.floor(tonumber(changed[#changed])))
end
local pairs_out = {}
for j = 1, #changed, 2 do
  local key = changed[j]
  local st, _, v = current(key)
  if st then
    pairs_out[#pairs_out + 1] = key
    pairs_out[#pairs_out + 1] = v
  else
    -- The record expired (or was not one): the same as none, the key is closed for the fleet.
    redis.call('ZREM', chk, key)
  end
end
local out = {redis.call('GET', idk), string.format('%d', snow), last, tostring(#leases)}
for _, h in ipairs(leases) do out[#out + 1] = h end
out[#out + 1] = tostring(#counts / 2)
for _, c in ipairs(counts) do out[#out + 1] = c end
out[#out + 1] = tostring(#windows)
for _, w in ipairs(windows) do out[#out + 1] = w end
out[#out + 1] = tostring(#written)
for _, w in ipairs(written) do out[#out + 1] = w end
out[#out + 1] = tostring(#repairs)
for _, r in ipairs(repairs) do out[#out + 1] = r end
for _, x in ipairs(pairs_out) do out[#out + 1] = x end
return out
)lua";

// What is left until `deadline`, in whole microseconds (0 once it passed).
std::chrono::microseconds left_until(Deadline deadline) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return std::chrono::microseconds::zero();
  return std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
}

timeval to_timeval(std::chrono::microseconds us) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(us.count() / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(us.count() % 1'000'000);
  return tv;
}

// Waits until the socket is ready for `events` or the deadline passes (false).
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    const auto left = left_until(deadline);
    if (left <= std::chrono::microseconds::zero()) return false;
    pollfd p{fd, events, 0};
    // Rounded up, so that a wait of less than a millisecond is not a busy loop.
    const int ms = static_cast<int>(std::min<std::int64_t>((left.count() + 999) / 1000, 1'000'000));
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the read or write report the error
  }
}

std::string reply_text(const redisReply* r) { return std::string(r->str, r->len); }

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

std::vector<std::string> script_args(const std::string& sha_or_script, bool eval,
                                     const std::string& prefix, const SyncRequest& req,
                                     const std::vector<const FleetOp*>& ops, std::uint64_t cursor,
                                     std::chrono::milliseconds retention,
                                     std::chrono::milliseconds idle_ttl) {
  std::vector<std::string> args;
  args.reserve(20 + 5 * ops.size());
  args.push_back(eval ? "EVAL" : "EVALSHA");
  args.push_back(sha_or_script);
  args.push_back("1");
  args.push_back(prefix + "seq");
  args.push_back(prefix);
  args.push_back(req.instance);
  args.push_back(std::to_string(req.now_ms));
  args.push_back(std::to_string(req.quorum));
  args.push_back(std::to_string(req.quorum_window_ms));
  args.push_back(std::to_string(2 * req.quorum_window_ms));
  args.push_back(std::to_string(cursor));
  args.push_back(std::to_string(ops.size()));
  const bool counting = req.count_bucket_ms > 0 && req.count_buckets > 0;
  args.push_back(std::to_string(counting ? req.count_bucket_ms : 0));
  args.push_back(std::to_string(counting ? req.count_buckets : 0));
  args.push_back(std::to_string(counting ? req.count_bucket_ms * (req.count_buckets + 1) : 1));
  args.push_back(std::to_string(std::max<std::uint32_t>(req.max_changes, 1)));
  args.push_back(std::to_string(std::max<std::int64_t>(req.window_ttl_ms, 1)));
  args.push_back(std::to_string(retention.count()));
  args.push_back(std::to_string(idle_ttl.count()));
  for (const FleetOp* one : ops) {
    const FleetOp& op = *one;
    const bool assert_window = op.kind == FleetOp::Kind::assert_open && op.fleet_window;
    args.push_back(assert_window ? "assertw" : op_name(op.kind));
    args.push_back(op.key);
    switch (op.kind) {
      case FleetOp::Kind::count:
        args.push_back(std::to_string(op.successes));
        args.push_back(std::to_string(op.failures));
        args.push_back("0");
        break;
      case FleetOp::Kind::window:
        args.push_back(std::to_string(op.calls));
        args.push_back(std::to_string(op.failures));
        args.push_back(std::to_string(op.slow));
        break;
      default:
        args.push_back(std::string(to_string(op.reason)));
        args.push_back(std::to_string(op.until_ms));
        args.push_back(std::to_string(op.kind == FleetOp::Kind::lease ? op.lease_ms
                                      : op.kind == FleetOp::Kind::assert_open
                                          ? static_cast<std::int64_t>(op.known_sequence)
                                          : std::max<std::int64_t>(op.max_open_ms, 0)));
        break;
    }
  }
  return args;
}

Expected<SyncReply, StoreError> parse_script_reply(const redisReply* r, std::size_t n_ops) {
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
  if (!parse_u64(r->element[2], out.sequence) || out.sequence >= (std::uint64_t{1} << 53))
    return protocol("a sequence that is not a number below 2^53");
  // A list: its count at `at`, then that many elements (at most what is left).
  size_t at = 3;
  auto list = [&](std::uint64_t per, std::uint64_t& count) {
    if (at >= r->elements || !parse_u64(r->element[at], count) ||
        count > (r->elements - at - 1) / per)
      return false;
    ++at;
    return true;
  };
  std::uint64_t leases = 0, counts = 0, windows = 0, written = 0, repairs = 0;
  if (!list(1, leases)) return protocol("a bad lease count");
  for (size_t i = 0; i < leases; ++i) out.lease_holders.push_back(reply_text(r->element[at++]));
  if (!list(2, counts)) return protocol("a bad count of counts");
  for (size_t i = 0; i < counts; ++i, at += 2)
    out.counts.push_back({reply_text(r->element[at]), reply_text(r->element[at + 1])});
  if (!list(1, windows)) return protocol("a bad count of windows");
  for (size_t i = 0; i < windows; ++i) out.windows.push_back(reply_text(r->element[at++]));
  if (!list(1, written) || written != n_ops) return protocol("a bad count of writes");
  for (size_t i = 0; i < written; ++i) {
    std::uint64_t seq = 0;
    if (!parse_u64(r->element[at++], seq)) return protocol("a write that is not a sequence");
    out.written.push_back(seq);
  }
  if (!list(1, repairs)) return protocol("a bad count of repairs");
  for (size_t i = 0; i < repairs; ++i) out.repairs.push_back(reply_text(r->element[at++]));
  if ((r->elements - at) % 2 != 0) return protocol("an odd number of key/value elements");
  out.changes.reserve((r->elements - at) / 2);
  for (size_t i = at; i < r->elements; i += 2) {
    out.changes.push_back(RawRecord{reply_text(r->element[i]), reply_text(r->element[i + 1])});
  }
  return out;
}

const char* fleet_script() noexcept { return kScript; }

void bad(std::string field, std::string message) {
  bulwark::detail::raise_config_error(
      ConfigError{"redis fleet store", std::move(field), std::move(message)});
}

}  // namespace wire

using namespace wire;

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
  if (config_.timeout <= std::chrono::milliseconds::zero()) bad("timeout", "must be positive");
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
  // An exchange() running on another thread returns by its deadline.
  std::lock_guard lock(mu_);
  if (ctx_ != nullptr) redisFree(ctx_);  // whatever it was in the middle of
  ctx_ = nullptr;
}

StoreError RedisFleetStore::fail(StoreError e) {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  connected_.store(false, std::memory_order_relaxed);
  // Exponential backoff with jitter: a uniform draw in [cap/2, cap].
  const std::int64_t base = config_.reconnect_min.count();
  const std::int64_t cap = std::min<std::int64_t>(config_.reconnect_max.count(),
                                                  base << std::min<std::uint32_t>(failures_, 20));
  ++failures_;
  std::uniform_int_distribution<std::int64_t> jitter(cap / 2, cap);
  next_attempt_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(jitter(rng_));
  return e;
}

Expected<redisReply*, StoreError> RedisFleetStore::round_trip(Deadline deadline, const char* what) {
  redisContext* c = ctx_;
  auto timed_out = [&] {
    return Unexpected(fail(
        {StoreError::Kind::timeout, std::string(what) + ": no answer by the deadline (timeout " +
                                        std::to_string(config_.timeout.count()) + " ms)"}));
  };
  auto io_error = [&] {
    const std::string why = c->errstr[0] != '\0' ? c->errstr : "the connection failed";
    return Unexpected(fail({StoreError::Kind::unavailable, std::string(what) + ": " + why}));
  };
  // A socket timeout too, so that no single read or write can outlast the deadline.
  const auto left = left_until(deadline);
  if (left <= std::chrono::microseconds::zero()) return timed_out();
  redisSetTimeout(c, to_timeval(left));
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(c, &done) != REDIS_OK) {
      if (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) return timed_out();
      return io_error();
    }
    if (done == 0 && !wait_for(c->fd, POLLOUT, deadline)) return timed_out();
  }
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(c, &raw) != REDIS_OK)
      return Unexpected(fail(
          {StoreError::Kind::protocol,
           std::string(what) + ": the server's reply is not RESP: " + std::string(c->errstr)}));
    if (raw != nullptr) return static_cast<redisReply*>(raw);
    if (!wait_for(c->fd, POLLIN, deadline)) return timed_out();
    redisSetTimeout(c, to_timeval(std::max(left_until(deadline), std::chrono::microseconds(1))));
    if (redisBufferRead(c) != REDIS_OK) {
      if (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) return timed_out();
      return io_error();
    }
  }
}

Expected<void, StoreError> RedisFleetStore::connect(Deadline deadline) {
  const auto left = left_until(deadline);
  if (left <= std::chrono::microseconds::zero())
    return Unexpected(fail({StoreError::Kind::timeout, "no time left to connect"}));
  redisContext* c = redisConnectWithTimeout(config_.host.c_str(), config_.port, to_timeval(left));
  if (c == nullptr) return Unexpected(fail({StoreError::Kind::unavailable, "out of memory"}));
  ctx_ = c;
  if (c->err != 0) {
    const bool timeout = c->err == REDIS_ERR_IO && (errno == ETIMEDOUT || errno == EINPROGRESS);
    const std::string why = c->errstr;
    return Unexpected(
        fail({timeout ? StoreError::Kind::timeout : StoreError::Kind::unavailable,
              "connecting to " + config_.host + ":" + std::to_string(config_.port) + ": " + why}));
  }
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
    auto raw = round_trip(deadline, "setting up the connection");
    if (!raw) return Unexpected(raw.error());
    ReplyPtr r(*raw);
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
  connects_.fetch_add(1, std::memory_order_relaxed);
  connected_.store(true, std::memory_order_relaxed);
  return {};
}

Expected<SyncReply, StoreError> RedisFleetStore::exchange(const SyncRequest& req) {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    return Unexpected(
        StoreError{StoreError::Kind::rejected,
                   "exchange() is already running on another thread: a RedisFleetStore serves one "
                   "exchange at a time (one Fleet's sync(); give each Fleet its own store)"});
  }
  return exchange_locked(req);
}

Expected<SyncReply, StoreError> RedisFleetStore::exchange_locked(const SyncRequest& req) {
  const SigpipeGuard no_sigpipe;
  const Deadline deadline =
      std::min(req.deadline, std::chrono::steady_clock::now() + config_.timeout);
  if (ctx_ == nullptr) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_attempt_) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_attempt_ - now).count();
      return Unexpected(
          StoreError{StoreError::Kind::unavailable,
                     "not connected; next attempt in " + std::to_string(wait) + " ms"});
    }
    auto ok = connect(deadline);
    if (!ok) return Unexpected(ok.error());
  }
  std::vector<const FleetOp*> ops;
  ops.reserve(req.ops.size());
  for (const FleetOp& op : req.ops) ops.push_back(&op);
  const std::vector<std::string> args = script_args(
      sha_, false, config_.prefix, req, ops, req.cursor, config_.retention, config_.idle_ttl);
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) !=
      REDIS_OK)
    return Unexpected(fail({StoreError::Kind::unavailable, "EVALSHA: out of memory"}));
  auto raw = round_trip(deadline, "EVALSHA");
  if (!raw) return Unexpected(raw.error());
  ReplyPtr r(*raw);
  // One reply per request: anything more the server sent is not ours to read later.
  if (ctx_->reader != nullptr && ctx_->reader->pos < ctx_->reader->len)
    return Unexpected(fail({StoreError::Kind::protocol, "the server sent more than one reply"}));
  if (r->type == REDIS_REPLY_ERROR) {
    const std::string why = reply_text(r.get());
    // A server that lost its scripts (SCRIPT FLUSH, a failover) loads it again next time.
    if (why.rfind("NOSCRIPT", 0) == 0)
      return Unexpected(fail({StoreError::Kind::rejected, "the script is gone: " + why}));
    failures_ = 0;
    return Unexpected(StoreError{StoreError::Kind::rejected, "the fleet script failed: " + why});
  }
  failures_ = 0;
  return parse_script_reply(r.get(), req.ops.size());
}

}  // namespace bulwark::redis
