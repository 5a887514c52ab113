// Multi-process tests of megastored --roles=tablet:
//  * crash test: a server under concurrent synced writes is killed with
//    SIGKILL at random moments and restarted; every acknowledged write must
//    read back (MS_CRASH_ROUNDS rounds, default 20);
//  * garbage test: random bytes, truncated frames and oversized lengths sent
//    to its port; the server stays up and serves correct clients.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "base/random.h"
#include "base/rpc/rpc.h"
#include "base/test_util.h"
#include "gtest/gtest.h"
#include "storage/tabletserver/tablet_service.h"
#include "tests/subprocess.h"

namespace megastore {
namespace {

using storage::Mutation;
using storage::Row;
using storage::TabletClient;

// Starts megastored on a free loopback port; returns its address or "".
std::string StartServer(testing::Subprocess* p, const std::string& data) {
  if (!p->Start({MEGASTORED, "--roles=tablet", "--listen=127.0.0.1:0", "--data=" + data,
                 "--log-level=warn", "--flush-max-age=1s"})) {
    return "";
  }
  // Log lines (a warning under load) may come first.
  for (int i = 0; i < 50; ++i) {
    const std::string line = p->ReadLine(30000);
    if (line.empty()) return "";
    const size_t at = line.find("listening on ");
    if (at == std::string::npos) continue;
    const size_t start = at + 13;
    return line.substr(start, line.find(' ', start) - start);
  }
  return "";
}

TEST(TabletServerCrashTest, AcknowledgedWritesSurviveSigkillAtRandomMoments) {
  const char* rounds_env = std::getenv("MS_CRASH_ROUNDS");
  const int rounds = rounds_env != nullptr ? std::atoi(rounds_env) : 20;
  TestDir dir;
  const std::string data = dir.path() + "/data";
  Random rng(42);
  std::map<std::string, std::string> acked;  // row -> value
  std::mutex acked_mu;

  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    testing::Subprocess server;
    const std::string address = StartServer(&server, data);
    ASSERT_FALSE(address.empty()) << "megastored did not start";
    {
      TabletClient client(address, absl::Seconds(30));
      if (round == 0) {
        storage::TableSchema schema;
        schema.set_name("crash");
        schema.add_families()->set_name("cf");
        ASSERT_TRUE(client.CreateTable(schema).ok());
      }
      // Everything acknowledged in earlier rounds is still there.
      std::map<std::string, std::string> seen;
      ASSERT_TRUE(client
                      .ReadRows("crash", {}, {},
                                [&](Row& r) {
                                  seen[r.key] = r.cells.empty() ? "" : r.cells[0].value;
                                  return true;
                                })
                      .ok());
      for (const auto& [row, value] : acked) {
        auto it = seen.find(row);
        ASSERT_TRUE(it != seen.end()) << "acknowledged row " << row << " lost";
        ASSERT_EQ(it->second, value) << "row " << row;
      }
    }
    // Concurrent synced writers; the kill lands at a random moment.
    std::atomic<bool> stop{false};
    std::vector<std::thread> writers;
    for (int w = 0; w < 8; ++w) {
      writers.emplace_back([&, w] {
        TabletClient client(address, absl::Seconds(10));
        for (int i = 0; !stop; ++i) {
          const std::string row =
              "r" + std::to_string(round) + "-" + std::to_string(w) + "-" + std::to_string(i);
          const std::string value = "v" + std::to_string(round * 100000 + i);
          // Overwrite an older acknowledged row now and then, too.
          if (client.MutateRow("crash", row, {Mutation::SetCell("cf", "q", value)}).ok()) {
            std::lock_guard<std::mutex> lock(acked_mu);
            acked[row] = value;
          } else {
            return;  // the server died
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng.Uniform(300)));
    server.Kill(SIGKILL);
    stop = true;
    for (auto& t : writers) t.join();
  }
  // A last restart checks the final round.
  testing::Subprocess server;
  const std::string address = StartServer(&server, data);
  ASSERT_FALSE(address.empty());
  TabletClient client(address, absl::Seconds(30));
  size_t found = 0;
  ASSERT_TRUE(client
                  .ReadRows("crash", {}, {},
                            [&](Row& r) {
                              auto it = acked.find(r.key);
                              if (it != acked.end() && !r.cells.empty() &&
                                  r.cells[0].value == it->second)
                                ++found;
                              return true;
                            })
                  .ok());
  EXPECT_EQ(found, acked.size());
  std::printf("crash test: %zu acknowledged writes over %d SIGKILLed rounds, all read back: %s\n",
              acked.size(), rounds, found == acked.size() ? "yes" : "NO");
  EXPECT_GT(acked.size(), static_cast<size_t>(rounds));
  server.Kill(SIGTERM);
}

bool SendGarbage(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (ok) ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::close(fd);
  return ok;
}

TEST(TabletServerGarbageTest, GarbageOnThePortNeverStopsTheServer) {
  TestDir dir;
  testing::Subprocess server;
  const std::string address = StartServer(&server, dir.path() + "/data");
  ASSERT_FALSE(address.empty());
  const int port = std::atoi(address.substr(address.rfind(':') + 1).c_str());
  TabletClient client(address, absl::Seconds(30));
  storage::TableSchema schema;
  schema.set_name("t");
  schema.add_families()->set_name("cf");
  ASSERT_TRUE(client.CreateTable(schema).ok());

  Random rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string bytes;
    switch (i % 4) {
      case 0:
        bytes = rng.Bytes(rng.Uniform(2000));
        break;  // random bytes
      case 1:
        bytes = rpc::EncodeFrame(rng.Bytes(100)).substr(0, rng.Uniform(50));
        break;  // truncated
      case 2:
        bytes = std::string("\xff\xff\xff\xff") + rng.Bytes(12);
        break;    // oversized length
      default: {  // valid frame, bad body
        bytes = rpc::EncodeFrame(rng.Bytes(64));
        break;
      }
    }
    ASSERT_TRUE(SendGarbage(port, bytes)) << "server stopped accepting connections at " << i;
    if (i % 50 == 0) {
      ASSERT_TRUE(
          client.MutateRow("t", "r" + std::to_string(i), {Mutation::SetCell("cf", "q", "v")}).ok());
    }
  }
  auto row = client.ReadRow("t", "r150");
  ASSERT_TRUE(row.ok()) << row.status();
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ(::kill(server.pid(), 0), 0) << "megastored died";
  server.Kill(SIGTERM);
}

}  // namespace
}  // namespace megastore
