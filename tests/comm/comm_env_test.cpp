// Tests of commOptionsFromEnv (backend/comm/comm_env.cpp): the variables a
// torchrun-style launcher sets, parsed in this process with setenv/unsetenv
// (each test saves and restores them).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/comm/communicator.h"

namespace kiln {
namespace {

class CommEnv : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {"RANK",
                                          "WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "KILN_STORE_DIR",
                                          "KILN_COMM_TIMEOUT",
                                          "KILN_RENDEZVOUS_TIMEOUT",
                                          "KILN_CHECKPOINT_TIMEOUT",
                                          "KILN_STORE_TOKEN",
                                          "KILN_JOB_ID",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "TORCHELASTIC_USE_AGENT_STORE",
                                          "TORCHELASTIC_RUN_ID",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "GLOO_SOCKET_IFNAME",
                                          "KILN_SOCKET_IFNAME"};
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_.emplace_back(v, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (auto& [name, old] : saved_) old ? ::setenv(name, old->c_str(), 1) : ::unsetenv(name);
  }
  // The error of the current environment; "" if it parsed.
  static std::string error() {
    const auto o = commOptionsFromEnv();
    return o.ok() ? "" : o.error().message;
  }
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(CommEnv, TorchrunsAgentStoreIsNamespacedByRunAndAttempt) {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  ::setenv("TORCHELASTIC_RUN_ID", "job-7", 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
  auto o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(o->agent_store);
  EXPECT_EQ(agentStorePrefix(*o), "/kiln/job-7/attempt_2/");
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->agent_store);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "maybe", 1);
  EXPECT_EQ(error(), "TORCHELASTIC_USE_AGENT_STORE='maybe' is not True or False");
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  ::setenv("TORCHELASTIC_RUN_ID", "a/b", 1);
  EXPECT_EQ(error(), "TORCHELASTIC_RUN_ID='a/b' is not a run id (1 to 256 characters, no '/')");
  ::setenv("TORCHELASTIC_RUN_ID", "job-7", 1);
  ::setenv("TORCHELASTIC_RESTART_COUNT", "-1", 1);
  EXPECT_EQ(error(), "TORCHELASTIC_RESTART_COUNT='-1' is not a whole number (0 or more)");
  ::setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
  ::setenv("KILN_STORE_DIR", "/tmp/x", 1);
  EXPECT_EQ(error(), "KILN_STORE_DIR and TORCHELASTIC_USE_AGENT_STORE=True both name a store; unset one");
}

TEST_F(CommEnv, SocketInterfaceKilnsOverGloos) {
  ::setenv("GLOO_SOCKET_IFNAME", "eth1", 1);
  auto o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->socket_ifname, "eth1");
  ::setenv("KILN_SOCKET_IFNAME", "veth0", 1);
  o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->socket_ifname, "veth0");
  ::setenv("KILN_SOCKET_IFNAME", "a/b", 1);
  EXPECT_EQ(error(), "KILN_SOCKET_IFNAME='a/b' is not a network interface name (e.g. eth0)");
}

TEST_F(CommEnv, UnsetMeansOneProcess) {
  const auto o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->world_size, 1);
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->master_addr, "127.0.0.1");
  // PyTorch's defaults: a 30-minute process-group timeout, torchrun's
  // 10-minute join; an hour for rank 0's checkpoint I/O.
  EXPECT_EQ(o->timeout, std::chrono::minutes(30));
  EXPECT_EQ(o->rendezvous_timeout, std::chrono::minutes(10));
  EXPECT_EQ(o->checkpoint_timeout, std::chrono::hours(1));
  EXPECT_EQ(o->store_secret, "");
  EXPECT_EQ(o->run_id, "none");
}

TEST_F(CommEnv, LocalRankDefaultsToTheGlobalOneAndIsChecked) {
  ::setenv("RANK", "5", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  auto o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->local_rank, 5);  // one machine: the local ranks are the global ones
  EXPECT_EQ(o->local_world_size, 8);
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->local_rank, 1);
  EXPECT_EQ(o->local_world_size, 4);
  ::setenv("LOCAL_RANK", "4", 1);
  EXPECT_NE(error().find("LOCAL_RANK='4' is out of range for LOCAL_WORLD_SIZE=4"), std::string::npos) << error();
  ::setenv("LOCAL_RANK", "0", 1);
  ::setenv("LOCAL_WORLD_SIZE", "two", 1);
  EXPECT_NE(error().find("LOCAL_WORLD_SIZE='two'"), std::string::npos) << error();
}

TEST_F(CommEnv, ReadsEveryVariable) {
  ::setenv("RANK", "3", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("MASTER_ADDR", "10.1.2.3", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("KILN_COMM_TIMEOUT", "2.5", 1);
  ::setenv("KILN_RENDEZVOUS_TIMEOUT", "7", 1);
  ::setenv("KILN_CHECKPOINT_TIMEOUT", "0.25", 1);
  ::setenv("KILN_STORE_TOKEN", "s3cret", 1);
  ::setenv("TORCHELASTIC_RUN_ID", "elastic", 1);
  ::setenv("KILN_JOB_ID", "mine", 1);  // Kiln's own wins
  auto o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->rank, 3);
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->master_addr, "10.1.2.3");
  EXPECT_EQ(o->master_port, 29500);
  EXPECT_EQ(o->timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(o->rendezvous_timeout, std::chrono::seconds(7));
  EXPECT_EQ(o->checkpoint_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(o->store_secret, "s3cret");
  EXPECT_EQ(o->run_id, "mine");
  ::unsetenv("MASTER_PORT");
  ::setenv("KILN_STORE_DIR", "/tmp/kiln-store", 1);  // a file store needs no port
  o = commOptionsFromEnv();
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(o->store_dir, "/tmp/kiln-store");
}

TEST_F(CommEnv, MalformedValuesNameTheVariable) {
  struct Case {
    const char* rank;
    const char* world;
    const char* port;
    const char* timeout;
    const char* expected;
  };
  const Case cases[] = {
      {"1", nullptr, "1", nullptr, "RANK is set but WORLD_SIZE is not"},
      {nullptr, "2", "1", nullptr, "WORLD_SIZE is set but RANK is not"},
      {"4", "4", "1", nullptr, "RANK=4 is out of range for WORLD_SIZE=4 (0..3)"},
      {"-1", "4", "1", nullptr, "RANK='-1'"},
      {"abc", "2", "1", nullptr, "RANK='abc'"},
      {"0", "2x", "1", nullptr, "WORLD_SIZE='2x'"},
      {"0", "0", "1", nullptr, "WORLD_SIZE='0'"},
      {"0", "2", nullptr, nullptr, "MASTER_PORT is not set"},
      {"0", "2", "70000", nullptr, "MASTER_PORT='70000'"},
      {"0", "2", "1", "soon", "KILN_COMM_TIMEOUT='soon'"},
      {"0", "2", "1", "-3", "KILN_COMM_TIMEOUT='-3'"},
      {"0", "2", "1", "1e9", "KILN_COMM_TIMEOUT='1e9' is not a number of seconds (0.001 to a week"},
  };
  for (const Case& c : cases) {
    const std::pair<const char*, const char*> vars[] = {
        {"RANK", c.rank}, {"WORLD_SIZE", c.world}, {"MASTER_PORT", c.port}, {"KILN_COMM_TIMEOUT", c.timeout}};
    for (auto [name, v] : vars) v ? ::setenv(name, v, 1) : ::unsetenv(name);
    const std::string e = error();
    EXPECT_NE(e.find(c.expected), std::string::npos) << "expected '" << c.expected << "', got '" << e << "'";
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  ::unsetenv("KILN_COMM_TIMEOUT");
  ::setenv("KILN_CHECKPOINT_TIMEOUT", "0", 1);
  EXPECT_NE(error().find("KILN_CHECKPOINT_TIMEOUT='0'"), std::string::npos) << error();
  ::unsetenv("KILN_CHECKPOINT_TIMEOUT");
  ::setenv("KILN_RENDEZVOUS_TIMEOUT", "x", 1);
  EXPECT_NE(error().find("KILN_RENDEZVOUS_TIMEOUT='x'"), std::string::npos) << error();
}

}  // namespace
}  // namespace kiln
