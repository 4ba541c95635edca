// Runs the `bulwark` executable as a child process for the end-to-end tests: its exit
// status, what it wrote, and its peak memory (wait4's ru_maxrss).
//
//   CliRun r = run({"replay", "--config", cfg, trace});
//   EXPECT_EQ(r.status, 0) << r.err;
//
// stdout and stderr go to temporary files (no pipe can fill up and block the child);
// stdin is /dev/null, the given text, or whatever `feed` writes into a pipe while the
// child runs.

#ifndef BULWARK_TESTS_CLI_PROCESS_H_
#define BULWARK_TESTS_CLI_PROCESS_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace bulwark::testing {

struct CliRun {
  int status = -1;      // exit status; 128 + signal if killed by one
  std::string out;      // stdout
  std::string err;      // stderr
  long max_rss_kb = 0;  // the child's peak resident set size
};

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string temp_path(const char* what) {
  std::string pattern = std::string(::testing::TempDir()) + "bulwark_" + what + "_XXXXXX";
  const int fd = mkstemp(pattern.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  close(fd);
  return pattern;
}

// Runs BULWARK_CLI_PATH with `args`. `feed`, if given, writes the child's stdin (a
// pipe) and returns when done; otherwise stdin is `input` (or empty). `stdout_to`, if
// given, is the file standard output goes to (opened for writing, appended to: /dev/full,
// or a file the command reads), and `out` stays empty; `stdin_from`, if given, is the
// file standard input is (instead of `input`).
inline CliRun run(const std::vector<std::string>& args, const std::string& input = "",
                  const std::function<void(int fd)>& feed = {}, const std::string& stdout_to = "",
                  const std::string& stdin_from = "") {
  const std::string out_path = stdout_to.empty() ? temp_path("out") : stdout_to;
  const std::string err_path = temp_path("err");
  std::string in_path;
  int pipe_fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (feed) {
    if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[0], 0);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
    posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  } else if (!stdin_from.empty()) {
    posix_spawn_file_actions_addopen(&actions, 0, stdin_from.c_str(), O_RDONLY, 0);
  } else {
    in_path = temp_path("in");
    std::ofstream(in_path, std::ios::binary) << input;
    posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                   stdout_to.empty() ? O_WRONLY | O_TRUNC : O_WRONLY | O_APPEND, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_TRUNC, 0);

  std::vector<std::string> argv_s{BULWARK_CLI_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("posix_spawn failed");
  if (feed) {
    close(pipe_fds[0]);
    // A child that stops reading early must not kill the test with SIGPIPE.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    struct sigaction previous {};
    sigaction(SIGPIPE, &ignore, &previous);
    feed(pipe_fds[1]);
    close(pipe_fds[1]);
    sigaction(SIGPIPE, &previous, nullptr);
  }
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) throw std::runtime_error("wait4 failed");
  CliRun r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (stdout_to.empty()) r.out = read_all(out_path);
  r.err = read_all(err_path);
  r.max_rss_kb = usage.ru_maxrss;
  if (stdout_to.empty()) std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  if (!in_path.empty()) std::remove(in_path.c_str());
  return r;
}

// Writes all of `data` to `fd`; false if the reader went away.
inline bool write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, data, n);
    if (w <= 0) return false;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

inline std::string source_path(const std::string& relative) {
  return std::string(BULWARK_SOURCE_DIR) + "/" + relative;
}

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_CLI_PROCESS_H_
