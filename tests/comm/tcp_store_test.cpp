// Tests of the TCP rendezvous store (backend/comm/tcp_store.h) on its own:
// server and clients as objects of this process, talking over loopback. The
// rendezvous through it with rank processes is in gloo_communicator_test.cpp.
#include "backend/comm/tcp_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/comm/c10d_store.h"
#include "backend/comm/communicator.h"
#include "core/result.h"
#include "tests/comm/gloo_test_helpers.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::freePort;

TEST(GlooTcpStore, GetWaitsForSet) {
  const int port = freePort();
  TcpStore server("127.0.0.1", port, true, 5s);
  TcpStore client("localhost", port, false, 5s);
  EXPECT_FALSE(client.check("k"));
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    server.set("k", {'a', '\0', 'b'});
  });
  EXPECT_EQ(client.get("k"), (std::vector<char>{'a', '\0', 'b'}));
  setter.join();
  client.wait({"k"}, 100ms);
  EXPECT_TRUE(server.check("k"));
}

TEST(GlooTcpStore, ErrorsAreOneClearLine) {
  const int port = freePort();
  TcpStore server("127.0.0.1", port, true, 300ms);
  try {
    server.get("never");
    ADD_FAILURE() << "get of a missing key returned";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("key 'never' was not set within 0.3 s"), std::string::npos) << e.what();
  }
  const auto t0 = Clock::now();
  try {
    TcpStore lonely("127.0.0.1", freePort(), false, 300ms);
    lonely.set("k", {});
    ADD_FAILURE() << "set without a server returned";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find(": no answer from rank 0 within 0.3 s (is MASTER_ADDR/MASTER_PORT right?)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - t0, 2s);
}

// The c10d client against a real torch.distributed.TCPStore is in
// tests/cli/torchrun_cli.sh; here, what it says when nobody serves.
TEST(C10dStore, NoServerIsOneClearLineWithinTheTimeout) {
  const int port = freePort();
  const auto t0 = Clock::now();
  try {
    C10dStore lonely("127.0.0.1", port, "/kiln/none/attempt_0/", 300ms);
    lonely.set("k", {'1'});
    ADD_FAILURE() << "set without a server returned";
  } catch (const KilnException& e) {
    EXPECT_EQ(std::string(e.what()), "torchrun's store 127.0.0.1:" + std::to_string(port) +
                                         ": no answer within 0.3 s (is the torchrun agent running, and "
                                         "MASTER_ADDR/MASTER_PORT its store?)");
  }
  EXPECT_LT(Clock::now() - t0, 2s);
}

TEST(GlooTcpStore, PortInUseFailsAtOnce) {
  const int port = freePort();
  TcpStore first("127.0.0.1", port, true, 5s);
  try {
    TcpStore second("127.0.0.1", port, true, 5s);
    ADD_FAILURE() << "a second server on the same port started";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("port " + std::to_string(port) + " is already in use"), std::string::npos)
        << e.what();
  }
  CommOptions o;  // rank 0 of 2 starts the store first, and fails at once
  o.world_size = 2;
  o.master_port = port;
  o.timeout = 5s;
  o.rendezvous_timeout = 5s;
  const auto comm = createGlooCommunicator(o);
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.error().message.find("rendezvous (rank 0 of 2): TCP store 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << comm.error().message;
}

TEST(GlooTcpStore, ServerStopsPromptly) {
  const int port = freePort();
  auto server = std::make_unique<TcpStore>("127.0.0.1", port, true, 5s);
  TcpStore client("127.0.0.1", port, false, 5s);
  client.set("k", {'x'});  // a connected client must not keep the server alive
  const auto t0 = Clock::now();
  server.reset();
  EXPECT_LT(Clock::now() - t0, 500ms);
}

}  // namespace
}  // namespace kiln
