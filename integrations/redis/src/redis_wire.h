// What the Redis stores share (internal, not installed): the fleet's Lua script, its
// arguments and its reply, and the socket helpers that bound every wait by a deadline.

#ifndef BULWARK_REDIS_SRC_REDIS_WIRE_H_
#define BULWARK_REDIS_SRC_REDIS_WIRE_H_

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "bulwark/redis/fleet_store.h"

namespace bulwark::redis::wire {

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
using Deadline = std::chrono::steady_clock::time_point;

// What is left until `deadline`, in whole microseconds (0 once it passed).
std::chrono::microseconds left_until(Deadline deadline);
timeval to_timeval(std::chrono::microseconds us);
// Waits until the socket is ready for `events` or the deadline passes (false).
bool wait_for(int fd, short events, Deadline deadline);
std::string reply_text(const redisReply* r);
bool parse_u64(const redisReply* r, std::uint64_t& out);
[[noreturn]] void bad(std::string field, std::string message);  // throws InvalidConfig

// The fleet script (redis_store.h describes it).
const char* fleet_script() noexcept;
// The script's command for `ops` (a subset of req.ops, in order) on the keys under
// `prefix`, read from `cursor`: EVALSHA <sha> ..., or EVAL <script> ... when `eval`.
std::vector<std::string> script_args(const std::string& sha_or_script, bool eval,
                                     const std::string& prefix, const SyncRequest& req,
                                     const std::vector<const FleetOp*>& ops, std::uint64_t cursor,
                                     std::chrono::milliseconds retention,
                                     std::chrono::milliseconds idle_ttl);
// The script's reply (an array, not an error) for `n_ops` ops, checked element by element:
// anything else than what the script returns is a `protocol` error, never a crash.
Expected<SyncReply, StoreError> parse_script_reply(const redisReply* r, std::size_t n_ops);

}  // namespace bulwark::redis::wire

#endif  // BULWARK_REDIS_SRC_REDIS_WIRE_H_
