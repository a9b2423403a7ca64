// Test helper: runs a body as N rank processes (fork), the way a launcher
// would, and collects how each ended. A rank's body throws (or fails an
// EXPECT inside a child, which cannot report to gtest) to fail: its message
// comes back through a pipe. Ranks meet through a file store in a fresh
// temporary directory unless the body builds its own CommOptions.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backend/comm/communicator.h"

namespace kiln::testing {

struct RankOutcome {
  int exit_code = -1;   ///< the child's exit status; -1: killed (signal or our timeout)
  std::string message;  ///< what it wrote to its pipe (an exception's message)
  bool timed_out = false;
};

/// A CommOptions for `rank` of `n` meeting in `dir` (file store), with `timeout`.
inline CommOptions fileStoreOptions(const std::string& dir, int rank, int n, std::chrono::milliseconds timeout) {
  CommOptions o;
  o.rank = rank;
  o.world_size = n;
  o.store_dir = dir;
  o.timeout = timeout;
  o.rendezvous_timeout = timeout;
  return o;
}

/// Fork `n` children; child r runs body(r, options of rank r) and exits 0, or
/// 1 with the exception's message. Children still running after `limit` are
/// killed (timed_out). Returns one outcome per rank.
inline std::vector<RankOutcome> runRanks(int n, const std::function<void(int, const CommOptions&)>& body,
                                         std::chrono::milliseconds comm_timeout = std::chrono::seconds(20),
                                         std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  char tmpl[] = "/tmp/kiln-ranks-XXXXXX";
  const std::string dir = mkdtemp(tmpl) ? tmpl : "/tmp";
  std::vector<pid_t> pids(n);
  std::vector<int> fds(n);
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe(p) != 0) std::abort();
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      std::string msg;
      int code = 0;
      try {
        body(r, fileStoreOptions(dir, r, n, comm_timeout));
      } catch (const std::exception& e) {
        msg = e.what();
        code = 1;
      } catch (...) {
        msg = "unknown exception";
        code = 1;
      }
      if (!msg.empty() && write(p[1], msg.data(), msg.size()) < 0) code = 2;
      close(p[1]);
      _exit(code);  // no atexit handlers or gtest teardown in the child
    }
    close(p[1]);
    pids[r] = pid;
    fds[r] = p[0];
  }
  std::vector<RankOutcome> out(n);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> done(n, false);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        done[r] = true;
        --left;
        out[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (!done[r]) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          out[r].timed_out = true;
          done[r] = true;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    char buf[4096];
    ssize_t k;
    while ((k = read(fds[r], buf, sizeof buf)) > 0) out[r].message.append(buf, static_cast<size_t>(k));
    close(fds[r]);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return out;
}

}  // namespace kiln::testing
