#include "driver/ranks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::driver {
namespace {

/// This process's arguments as it was started (argv without argv[0]).
std::vector<std::string> ownArguments() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string a;
  while (std::getline(f, a, '\0')) args.push_back(a);
  if (!args.empty()) args.erase(args.begin());
  return args;
}

/// The arguments without --nproc N / --nproc=N.
std::vector<std::string> withoutNproc(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

/// A TCP port on 127.0.0.1 that was free a moment ago (rank 0's store binds it).
Result<int> freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Error{std::string("--nproc: cannot open a socket: ") + std::strerror(errno)};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  if (!ok) return Error{std::string("--nproc: cannot find a free port on 127.0.0.1: ") + std::strerror(errno)};
  return static_cast<int>(ntohs(addr.sin_port));
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

/// The environment's communication options (commOptionsFromEnv), with
/// --comm-timeout over KILN_COMM_TIMEOUT.
Result<CommOptions> commOptions(const CompileOptions& a) {
  auto opts = commOptionsFromEnv();
  if (opts && a.comm_timeout > 0)
    opts->timeout = std::chrono::milliseconds(static_cast<int64_t>(a.comm_timeout * 1000));
  return opts;
}

}  // namespace

bool shouldLaunch(const CompileOptions& a) {
  return a.nproc > 1 && !std::getenv("RANK");
}

int launchRanks(const CompileOptions& a) {
  auto opts = commOptions(a);  // a malformed KILN_COMM_TIMEOUT fails here, not in N ranks
  if (!opts) return reportError(opts.error());
  auto port = freePort();
  if (!port) return reportError(port.error());
  const std::vector<std::string> args = withoutNproc(ownArguments());
  const double timeout = std::chrono::duration<double>(opts->timeout).count();
  std::vector<pid_t> pids;
  for (int r = 0; r < a.nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0)
      return reportError(
          Error{std::string("--nproc: cannot start rank ") + std::to_string(r) + ": " + std::strerror(errno)});
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(*port).c_str(), 1);
      setenv("KILN_COMM_TIMEOUT", std::to_string(timeout).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      // Ranks share the cores: idle OpenMP threads must sleep, not spin,
      // or they starve the other ranks and the communication threads.
      setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
      if (r > 0) {  // rank 0 speaks for the run; the others only about errors
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, STDOUT_FILENO);
      }
      std::vector<char*> argv;
      std::string self = "kiln";
      argv.push_back(self.data());
      std::vector<std::string> copy = args;
      for (std::string& s : copy) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "kiln: error: --nproc: cannot start rank %d: %s\n", r, std::strerror(errno));
      _exit(127);
    }
    pids.push_back(pid);
  }

  // Wait for every rank; after the first failure, give the others the
  // communication timeout (plus a margin) to notice and exit by themselves.
  using Clock = std::chrono::steady_clock;
  int code = 0;
  std::string first_failure;
  std::optional<Clock::time_point> deadline;
  size_t left = pids.size();
  std::vector<bool> done(pids.size(), false);
  while (left > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (pids[r] == pid && !done[r]) {
          done[r] = true;
          --left;
          const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
          if (failed && first_failure.empty()) {
            first_failure = "rank " + std::to_string(r) + " " + describeStatus(status);
            code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
            deadline =
                Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout + 5));
          }
        }
      continue;
    }
    if (deadline && Clock::now() > *deadline) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (!done[r]) {
          std::cerr << "kiln: error: rank " << r << " still running " << timeout + 5 << " s after " << first_failure
                    << "; killing it\n";
          kill(pids[r], SIGKILL);
        }
      deadline.reset();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!first_failure.empty()) std::cerr << "kiln: error: " << first_failure << " (of " << a.nproc << " ranks)\n";
  return code;
}

Status joinRanks(CompileOptions& a) {
  auto opts = commOptions(a);
  if (!opts) return opts.error();
  if (opts->world_size <= 1) return {};
  setErrorPrefix("rank " + std::to_string(opts->rank) + ": ");
  // --device cuda: NCCL runs the step's collectives (one GPU per rank); the
  // Gloo communicator below still carries the set-up (initial weights, the
  // NCCL id, checkpoints).
  // The ranks on this machine split its cores (unless --threads says otherwise).
  if (a.threads == 0)
    a.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / opts->local_world_size);
  a.local_rank = opts->local_rank;
  auto comm = createGlooCommunicator(*opts);
  if (!comm) return comm.error();
  a.collectives = std::make_shared<CollectiveEngine>(std::shared_ptr<Communicator>(std::move(*comm)));
  return {};
}

}  // namespace kiln::driver
