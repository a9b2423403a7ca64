#include "driver/ranks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "backend/checkpoint.h"
#include "backend/comm/store_protocol.h"
#include "driver/messages.h"
#include "driver/model_args.h"
#include "driver/training_options.h"

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

/// The arguments without the launcher's own flags (--nproc, --nnodes,
/// --node-rank, --master-addr, --master-port, --max-restarts; "--flag V" or
/// "--flag=V"):
/// what every rank runs.
std::vector<std::string> withoutLauncherFlags(const std::vector<std::string>& args) {
  static const char* kFlags[] = {"--nproc", "--nnodes", "--node-rank", "--master-addr", "--master-port",
                                 "--max-restarts"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    bool drop = false;
    for (const char* f : kFlags) {
      const std::string flag = f;
      if (args[i] == flag) {
        ++i;  // and its value
        drop = true;
      } else if (args[i].rfind(flag + "=", 0) == 0) {
        drop = true;
      }
      if (drop) break;
    }
    if (!drop) out.push_back(args[i]);
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

/// The signal the launcher was asked to stop with (SIGINT, SIGTERM), 0
/// while none: the wait loop forwards it to the ranks.
volatile sig_atomic_t g_stop_signal = 0;

void recordStopSignal(int sig) {
  g_stop_signal = sig;
}

/// Forward SIGINT and SIGTERM to the ranks while they run (restored after).
class ForwardStopSignals {
 public:
  ForwardStopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = recordStopSignal;
    sigemptyset(&sa.sa_mask);
    for (int k = 0; k < 2; ++k) ::sigaction(kSignals[k], &sa, &old_[k]);
  }
  ~ForwardStopSignals() {
    for (int k = 0; k < 2; ++k) ::sigaction(kSignals[k], &old_[k], nullptr);
  }
  ForwardStopSignals(const ForwardStopSignals&) = delete;
  ForwardStopSignals& operator=(const ForwardStopSignals&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGINT, SIGTERM};
  struct sigaction old_[2] {};
};

/// Stop the ranks started so far: `sig`, then SIGKILL for any still running
/// after `grace`; reaps them all.
void stopRanks(const std::vector<pid_t>& pids, std::vector<bool>& done, int sig, std::chrono::milliseconds grace) {
  for (size_t r = 0; r < pids.size(); ++r)
    if (!done[r]) kill(pids[r], sig);
  const auto until = std::chrono::steady_clock::now() + grace;
  for (size_t r = 0; r < pids.size(); ++r) {
    while (!done[r]) {
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != 0) {
        done[r] = true;
        break;
      }
      if (std::chrono::steady_clock::now() > until) kill(pids[r], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended";
}

std::chrono::milliseconds fromSeconds(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
}

double toSeconds(std::chrono::milliseconds ms) {
  return std::chrono::duration<double>(ms).count();
}

/// The environment's communication options (commOptionsFromEnv), with
/// the timeout flags over their variables.
Result<CommOptions> commOptions(const CompileOptions& a) {
  auto opts = commOptionsFromEnv();
  if (!opts) return opts;
  if (a.comm_timeout > 0) opts->timeout = fromSeconds(a.comm_timeout);
  if (a.rendezvous_timeout > 0) opts->rendezvous_timeout = fromSeconds(a.rendezvous_timeout);
  if (a.checkpoint_timeout > 0) opts->checkpoint_timeout = fromSeconds(a.checkpoint_timeout);
  return opts;
}

/// What every rank of an attempt gets in its environment.
struct RankEnvironment {
  std::string master, secret, job;
  int port = 0, world = 1, first_rank = 0, restart = 0;
  CommOptions comm;
};

/// How an attempt ended: code 0 when every rank succeeded; `signal` when
/// the launcher was asked to stop; `fatal` when it could not start them
/// (reported already; no restart helps).
struct AttemptResult {
  int code = 0;
  int signal = 0;
  std::string first_failure;
  bool fatal = false;
};

/// Start a.nproc ranks running `args` and wait for them.
AttemptResult runAttempt(const CompileOptions& a, const std::vector<std::string>& args, const RankEnvironment& env) {
  std::vector<pid_t> pids;
  std::vector<bool> done;
  const pid_t launcher = getpid();
  for (int r = 0; r < a.nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {  // the ranks already started cannot train without this one
      const int err = errno;
      stopRanks(pids, done, SIGTERM, std::chrono::seconds(2));
      reportError(Error{std::string("--nproc: cannot start rank ") + std::to_string(r) + ": " + std::strerror(err) +
                        "; stopped the " + std::to_string(r) + " started"});
      return {1, 0, "", true};
    }
    if (pid == 0) {
      // A rank dies with its launcher (killed, crashed, Cancel in
      // kiln-studio), also if that happened before this line.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      setenv("RANK", std::to_string(env.first_rank + r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(env.world).c_str(), 1);
      setenv("GROUP_RANK", std::to_string(a.node_rank).c_str(), 1);
      setenv("MASTER_ADDR", env.master.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(env.port).c_str(), 1);
      setenv("KILN_COMM_TIMEOUT", std::to_string(toSeconds(env.comm.timeout)).c_str(), 1);
      setenv("KILN_RENDEZVOUS_TIMEOUT", std::to_string(toSeconds(env.comm.rendezvous_timeout)).c_str(), 1);
      setenv("KILN_CHECKPOINT_TIMEOUT", std::to_string(toSeconds(env.comm.checkpoint_timeout)).c_str(), 1);
      setenv("KILN_STORE_TOKEN", env.secret.c_str(), 1);
      setenv("KILN_JOB_ID", env.job.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(a.nproc).c_str(), 1);
      // Ranks share the cores: idle OpenMP threads must sleep, not spin,
      // or they starve the other ranks and the communication threads.
      setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
      if (env.first_rank + r > 0) {  // rank 0 speaks for the run; the others only about errors
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
    done.push_back(false);
  }

  // Wait for every rank. After the first failure the others usually fail at
  // once (their connections to it close) with their own message; one busy
  // in a long computation is stopped after a short grace.
  using Clock = std::chrono::steady_clock;
  const auto grace = std::min<Clock::duration>(env.comm.timeout, std::chrono::seconds(10));
  AttemptResult result;
  std::optional<Clock::time_point> deadline;
  size_t left = pids.size();
  while (left > 0) {
    if (const int sig = g_stop_signal) {  // Ctrl-C or kill: the ranks stop too
      std::cerr << "kiln: " << strsignal(sig) << ": stopping " << left << " rank(s)\n";
      stopRanks(pids, done, sig, std::chrono::seconds(5));
      result.signal = sig;
      return result;
    }
    std::vector<std::pair<size_t, int>> ended;  // (rank, status) of those that ended since the last look
    int status = 0;
    for (pid_t pid; (pid = waitpid(-1, &status, WNOHANG)) > 0;)
      for (size_t r = 0; r < pids.size(); ++r)
        if (pids[r] == pid && !done[r]) {
          done[r] = true;
          --left;
          ended.emplace_back(r, status);
        }
    if (!ended.empty()) {
      // Of ranks that ended together, one killed by a signal is the cause:
      // the others failed because their connections to it closed.
      std::stable_sort(ended.begin(), ended.end(),
                       [](const auto& x, const auto& y) { return WIFSIGNALED(x.second) && !WIFSIGNALED(y.second); });
      for (const auto& [r, st] : ended) {
        const bool failed = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        if (failed && result.first_failure.empty()) {
          result.first_failure =
              "rank " + std::to_string(env.first_rank + static_cast<int>(r)) + " " + describeStatus(st);
          result.code = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
          deadline = Clock::now() + grace;
        }
      }
      continue;
    }
    if (deadline && Clock::now() > *deadline) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (!done[r])
          std::cerr << "kiln: rank " << env.first_rank + static_cast<int>(r) << " still running "
                    << toSeconds(std::chrono::duration_cast<std::chrono::milliseconds>(grace)) << " s after "
                    << result.first_failure << "; stopping it\n";
      stopRanks(pids, done, SIGTERM, std::chrono::seconds(5));
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

/// `args` resuming from `checkpoint_dir` (any --resume given replaced).
std::vector<std::string> withResume(const std::vector<std::string>& args, const std::string& checkpoint_dir) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--resume") {
      ++i;
      continue;
    }
    if (args[i].rfind("--resume=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  out.push_back("--resume");
  out.push_back(checkpoint_dir);
  return out;
}

}  // namespace

bool shouldLaunch(const CompileOptions& a) {
  return (a.nproc > 1 || a.nnodes > 1) && !std::getenv("RANK");
}

int launchRanks(const CompileOptions& a, const LaunchOptions& launch) {
  // Options that every rank would refuse fail here once, not N times.
  if (Status st = validateOptions(a); !st) return reportError(st.error());
  if (launch.max_restarts < 0 || launch.max_restarts > kMaxRestarts)
    return reportError(Error{"--max-restarts must be between 0 and " + std::to_string(kMaxRestarts) + ", got " +
                             std::to_string(launch.max_restarts)});
  auto opts = commOptions(a);  // a malformed KILN_COMM_TIMEOUT fails here, not in N ranks
  if (!opts) return reportError(opts.error());
  RankEnvironment env;
  env.comm = *opts;
  env.master = a.master_addr.empty() ? "127.0.0.1" : a.master_addr;
  env.world = a.nnodes * a.nproc;
  env.first_rank = a.node_rank * a.nproc;
  // The store's secret: made here for one machine; several machines must
  // share one, which only the user can give them all.
  env.secret = opts->store_secret;
  env.job = opts->run_id;
  if (env.secret.empty() && a.nnodes > 1)
    return reportError(Error{"--nnodes " + std::to_string(a.nnodes) +
                             ": set KILN_STORE_TOKEN to the same secret on every node (e.g. export "
                             "KILN_STORE_TOKEN=$(openssl rand -hex 32)): rank 0's store admits only ranks that "
                             "know it"});
  if (env.secret.empty()) env.secret = store::newSecret();
  if (!std::getenv("KILN_JOB_ID") && a.nnodes == 1) env.job = "kiln-" + store::newSecret().substr(0, 12);
  const std::vector<std::string> args = withoutLauncherFlags(ownArguments());
  const ForwardStopSignals forward;
  std::vector<std::string> attempt_args = args;
  for (env.restart = 0;; ++env.restart) {
    // One machine: a free port on 127.0.0.1 unless given (a fresh one for
    // each attempt). Several: every launcher names node 0's address and
    // port (validateOptions insists).
    Result<int> port = a.master_port;
    if (a.master_port == 0) port = freePort();
    if (!port) return reportError(port.error());
    env.port = *port;
    const AttemptResult r = runAttempt(a, attempt_args, env);
    if (r.signal) return 128 + r.signal;
    if (r.code == 0 || r.fatal) return r.code;
    const std::string ranks = "(of " + std::to_string(env.world) + " ranks" +
                              (a.nnodes > 1 ? ", " + std::to_string(a.nproc) + " on this machine" : std::string()) +
                              ")";
    if (env.restart >= launch.max_restarts || g_stop_signal) {
      std::cerr << "kiln: error: " << r.first_failure << " " << ranks
                << (launch.max_restarts > 0 ? "; no restarts left (--max-restarts " +
                                                  std::to_string(launch.max_restarts) + ")"
                                            : std::string())
                << "\n";
      return r.code;
    }
    // Restart every rank, from the newest checkpoint when there is one.
    std::string from = "the start";
    attempt_args = args;
    if (!launch.checkpoint_dir.empty()) {
      if (const auto latest = latestCheckpoint(launch.checkpoint_dir)) {
        attempt_args = withResume(args, launch.checkpoint_dir);
        from = "checkpoint " + launch.checkpoint_dir + "/" + *latest;
      } else {
        from += " (no checkpoint in " + launch.checkpoint_dir + " yet)";
      }
    } else {
      from += " (no --checkpoint to resume from)";
    }
    std::cerr << "kiln: " << r.first_failure << " " << ranks << "; restarting the " << a.nproc << " ranks"
              << (a.nnodes > 1 ? " of this machine" : "") << " from " << from << " (restart " << env.restart + 1
              << " of " << launch.max_restarts << ")\n";
  }
}

Status joinRanks(CompileOptions& a) {
  if ((a.nproc > 1 || a.nnodes > 1) && std::getenv("RANK"))
    return Error{std::string(a.nproc > 1 ? "--nproc " + std::to_string(a.nproc) : "--nnodes") +
                 " starts ranks itself, but RANK is set: this process is already one rank of a launcher "
                 "(torchrun, or RANK/WORLD_SIZE set by hand); drop the launcher's flags, or unset RANK"};
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
  a.local_world_size = opts->local_world_size;
  // Settled from the flags and the environment, for the session (NCCL's
  // watchdog, the checkpoint barrier).
  a.comm_timeout = toSeconds(opts->timeout);
  a.rendezvous_timeout = toSeconds(opts->rendezvous_timeout);
  a.checkpoint_timeout = toSeconds(opts->checkpoint_timeout);
  auto comm = createGlooCommunicator(*opts);
  if (!comm) return comm.error();
  a.collectives = std::make_shared<CollectiveEngine>(std::shared_ptr<Communicator>(std::move(*comm)));
  return {};
}

}  // namespace kiln::driver
