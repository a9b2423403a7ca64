// commOptionsFromEnv (communicator.h): the CommOptions a torchrun-style
// launcher describes in the environment. Parsing is strict, because a typo in
// RANK or WORLD_SIZE otherwise shows up much later as a rendezvous that never
// completes; every error names the variable and its value.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>
#include <string>

#include "backend/comm/communicator.h"

namespace kiln {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;  // set-but-empty counts as unset, as in shells
  return std::string(v);
}

// A whole decimal integer in [lo, hi]; nullopt otherwise.
std::optional<long> parseInt(const std::string& s, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace

Result<CommOptions> commOptionsFromEnv() {
  CommOptions o;
  const auto rank = env("RANK"), world = env("WORLD_SIZE");
  if (rank.has_value() != world.has_value())
    return Error{std::string(rank ? "RANK is set but WORLD_SIZE is not" : "WORLD_SIZE is set but RANK is not") +
                 " (set both, or neither for a single process)"};
  if (world) {
    const auto w = parseInt(*world, 1, 1 << 20);
    if (!w) return Error{"WORLD_SIZE='" + *world + "' is not a whole number of processes (1 or more)"};
    const auto r = parseInt(*rank, 0, 1 << 20);
    if (!r) return Error{"RANK='" + *rank + "' is not a whole number (0 or more)"};
    if (*r >= *w)
      return Error{"RANK=" + *rank + " is out of range for WORLD_SIZE=" + *world + " (0.." + std::to_string(*w - 1) +
                   ")"};
    o.rank = static_cast<int>(*r);
    o.world_size = static_cast<int>(*w);
  }
  o.local_rank = o.rank;
  o.local_world_size = o.world_size;
  if (const auto lw = env("LOCAL_WORLD_SIZE")) {
    const auto v = parseInt(*lw, 1, o.world_size);
    if (!v)
      return Error{"LOCAL_WORLD_SIZE='" + *lw + "' is not a number of processes (1.." + std::to_string(o.world_size) +
                   ")"};
    o.local_world_size = static_cast<int>(*v);
  }
  if (const auto lr = env("LOCAL_RANK")) {
    const auto v = parseInt(*lr, 0, o.local_world_size - 1);
    if (!v)
      return Error{"LOCAL_RANK='" + *lr + "' is out of range for LOCAL_WORLD_SIZE=" +
                   std::to_string(o.local_world_size) + " (0.." + std::to_string(o.local_world_size - 1) + ")"};
    o.local_rank = static_cast<int>(*v);
  }
  if (const auto addr = env("MASTER_ADDR")) o.master_addr = *addr;
  for (const char* name : {"GLOO_SOCKET_IFNAME", "KILN_SOCKET_IFNAME"})  // Kiln's own wins
    if (const auto ifname = env(name)) {
      if (ifname->empty() || ifname->size() >= 16 || ifname->find_first_of("/ \t") != std::string::npos)
        return Error{std::string(name) + "='" + *ifname + "' is not a network interface name (e.g. eth0)"};
      o.socket_ifname = *ifname;
    }
  if (const auto dir = env("KILN_STORE_DIR")) o.store_dir = *dir;
  if (const auto port = env("MASTER_PORT")) {
    const auto p = parseInt(*port, 1, 65535);
    if (!p) return Error{"MASTER_PORT='" + *port + "' is not a port number (1..65535)"};
    o.master_port = static_cast<int>(*p);
  } else if (o.world_size > 1 && o.store_dir.empty()) {
    return Error{"MASTER_PORT is not set (WORLD_SIZE=" + std::to_string(o.world_size) +
                 " needs MASTER_PORT for the TCP store on rank 0, or KILN_STORE_DIR for a shared directory)"};
  }
  // torchrun: its agent already serves a c10d store on MASTER_PORT.
  if (const auto use = env("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*use != "True" && *use != "False" && *use != "true" && *use != "false" && *use != "1" && *use != "0")
      return Error{"TORCHELASTIC_USE_AGENT_STORE='" + *use + "' is not True or False"};
    o.agent_store = *use == "True" || *use == "true" || *use == "1";
  }
  for (const char* name : {"TORCHELASTIC_RUN_ID", "KILN_JOB_ID"})  // Kiln's own wins
    if (const auto id = env(name)) {
      if (id->size() > 256 || id->find('/') != std::string::npos)
        return Error{std::string(name) + "='" + *id + "' is not a run id (1 to 256 characters, no '/')"};
      o.run_id = *id;
    }
  if (const auto token = env("KILN_STORE_TOKEN")) {
    if (token->size() > 1024) return Error{"KILN_STORE_TOKEN is longer than 1024 characters"};
    o.store_secret = *token;
  }
  if (const auto n = env("TORCHELASTIC_RESTART_COUNT")) {
    const auto v = parseInt(*n, 0, 1 << 20);
    if (!v) return Error{"TORCHELASTIC_RESTART_COUNT='" + *n + "' is not a whole number (0 or more)"};
    o.restart_count = static_cast<int>(*v);
  }
  if (o.agent_store && !o.store_dir.empty())
    return Error{"KILN_STORE_DIR and TORCHELASTIC_USE_AGENT_STORE=True both name a store; unset one"};
  for (auto [name, field] : {std::pair{"KILN_COMM_TIMEOUT", &o.timeout},
                              std::pair{"KILN_RENDEZVOUS_TIMEOUT", &o.rendezvous_timeout},
                              std::pair{"KILN_CHECKPOINT_TIMEOUT", &o.checkpoint_timeout}})
    if (const auto t = env(name)) {
      errno = 0;
      char* end = nullptr;
      const double s = std::strtod(t->c_str(), &end);
      if (errno != 0 || end == t->c_str() || *end != '\0' || !std::isfinite(s) ||
          s < CommOptions::kMinTimeoutSeconds || s > CommOptions::kMaxTimeoutSeconds)
        return Error{std::string(name) + "='" + *t + "' is not a number of seconds (0.001 to a week, e.g. 60 or 2.5)"};
      *field = std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000.0)));
    }
  return o;
}

std::string agentStorePrefix(const CommOptions& o) {
  return "/kiln/" + o.run_id + "/attempt_" + std::to_string(o.restart_count) + "/";
}

}  // namespace kiln
