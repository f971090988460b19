// What a real cluster does when a peer dies, disagrees or talks nonsense: every survivor gets a
// clear error within a bounded time, no daemon crashes, and the next correct op succeeds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "engine/frame.h"
#include "net/socket.h"
#include "support/cluster.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Bytes;

// Sends `bytes` to HOST:PORT and closes the connection.
void send_raw(const std::string& address, const std::vector<std::byte>& bytes) {
  net::HostPort target;
  ASSERT_TRUE(net::parse_host_port(address, target).ok()) << address;
  net::UniqueFd socket;
  ASSERT_TRUE(net::connect_tcp(target, net::Deadline::after(std::chrono::seconds(2)), socket).ok());
  (void)net::write_all(socket.get(), bytes, net::Deadline::after(std::chrono::seconds(2)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

std::string data_address_of(const cli::LocalCluster& cluster, int rank) {
  const std::string log = cluster.log_of_worker(rank);
  std::smatch match;
  EXPECT_TRUE(std::regex_search(log, match, std::regex("data address ([0-9.]+:[0-9]+)"))) << log;
  return match.size() > 1 ? match[1].str() : "";
}

void expect_allreduce_works(testing::TestCluster& cluster) {
  const int p = static_cast<int>(cluster.clients.size());
  std::atomic<int> correct{0};
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, 777);
    try {
      client.allreduce(data.data(), 777, DataType::f32);
      if (data == testing::expected_reduction(DataType::f32, ReduceOp::sum, p, 777)) ++correct;
    } catch (const ClientError& error) {
      ADD_FAILURE() << "rank " << rank << ": " << error.what();
    }
  });
  EXPECT_EQ(correct, p);
}

TEST(ClusterFailures, AKilledWorkerIsNamedToEverySurvivorWithinSeconds) {
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  constexpr std::uint64_t kCount = 16 << 20;  // 64 MiB of f32
  testing::TestCluster cluster = testing::start_cluster(kRanks);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), kRanks);
  std::vector<Bytes> tensors(kRanks, Bytes(kCount * 4));
  std::atomic<bool> started{false};
  Clock::time_point killed_at;
  std::mutex mutex;
  std::vector<std::string> errors(kRanks);
  std::vector<Clock::duration> noticed_after(kRanks);
  std::thread killer([&] {
    while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // well inside the op
    std::lock_guard lock(mutex);
    killed_at = Clock::now();
    ::kill(cluster.cluster->worker(kVictim).pid(), SIGKILL);
  });
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    OpOptions options;
    options.algorithm = Algorithm::ring;
    options.timeout = std::chrono::seconds(30);
    for (int attempt = 0; attempt < 50; ++attempt) {
      try {
        started = true;
        client.allreduce(tensors[rank].data(), kCount, DataType::f32, options);
      } catch (const ClientError& error) {
        std::lock_guard lock(mutex);
        errors[rank] = error.what();
        noticed_after[rank] = Clock::now() - killed_at;
        return;
      }
    }
  });
  killer.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank == kVictim) continue;
    EXPECT_NE(errors[rank].find("rank 2"), std::string::npos)
        << "rank " << rank << ": " << errors[rank];
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(noticed_after[rank]);
    EXPECT_LT(ms, std::chrono::seconds(5)) << "rank " << rank;
    std::printf("rank %d noticed the killed rank 2 after %lld ms: %s\n", rank,
                static_cast<long long>(ms.count()), errors[rank].c_str());
  }
  EXPECT_FALSE(errors[kVictim].empty()) << "the victim's own client must see its daemon go";
  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank != kVictim) {
      EXPECT_TRUE(cluster.cluster->worker(rank).running()) << rank;
    }
  }
  EXPECT_TRUE(cluster.cluster->coordinator().running());
  // The coordinator noticed too and told the survivors: their next op fails at once.
  Bytes small(40);
  const auto start = Clock::now();
  EXPECT_THROW(cluster.clients[0].allreduce(small.data(), 10, DataType::f32), ClientError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(ClusterFailures, MismatchedSubmissionsFailEveryRankNamingBothSides) {
  constexpr int kRanks = 3;
  testing::TestCluster cluster = testing::start_cluster(kRanks);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), kRanks);
  std::vector<std::string> errors(kRanks);
  // A different count on rank 1.
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    const std::uint64_t count = rank == 1 ? 999 : 1000;
    Bytes data(count * 4);
    try {
      client.allreduce(data.data(), count, DataType::f32);
    } catch (const ClientError& error) {
      EXPECT_EQ(error.code(), ErrorCode::mismatch) << error.what();
      errors[rank] = error.what();
    }
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_NE(errors[rank].find("999 f32"), std::string::npos) << rank << ": " << errors[rank];
    EXPECT_NE(errors[rank].find("1000 f32"), std::string::npos) << rank << ": " << errors[rank];
  }
  // A different dtype on rank 2.
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    const DataType type = rank == 2 ? DataType::f64 : DataType::f32;
    Bytes data(100 * element_size(type));
    errors[rank].clear();
    try {
      client.allreduce(data.data(), 100, type);
    } catch (const ClientError& error) {
      errors[rank] = error.what();
    }
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_NE(errors[rank].find("100 f64"), std::string::npos) << rank << ": " << errors[rank];
    EXPECT_NE(errors[rank].find("100 f32"), std::string::npos) << rank << ": " << errors[rank];
  }
  expect_allreduce_works(cluster);
}

TEST(ClusterFailures, GarbageOnTheDataAndCoordinatorPortsIsRejectedAndLosesNothing) {
  constexpr int kRanks = 2;
  testing::TestCluster cluster = testing::start_cluster(kRanks);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), kRanks);
  std::mt19937_64 random(7);
  std::vector<std::byte> noise(4096);
  for (auto& byte : noise) byte = static_cast<std::byte>(random());
  engine::FrameHeader huge;
  huge.kind = engine::FrameKind::data;
  huge.length = 1ull << 40;
  const auto huge_bytes = engine::encode(huge);
  engine::FrameHeader hello;
  hello.kind = engine::FrameKind::hello;
  const auto hello_bytes = engine::encode(hello);
  const std::vector<std::byte> huge_frame(huge_bytes.begin(), huge_bytes.end());
  const std::vector<std::byte> truncated(hello_bytes.begin(), hello_bytes.begin() + 30);

  const std::string data_port = data_address_of(*cluster.cluster, 0);
  send_raw(data_port, noise);
  send_raw(data_port, huge_frame);
  send_raw(data_port, truncated);

  const std::string coordinator = cluster.cluster->coordinator_address();
  send_raw(coordinator, noise);
  send_raw(coordinator, {std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff}});
  send_raw(coordinator, {std::byte{10}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{1}});
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the hello timeout

  const std::string worker_log = cluster.cluster->log_of_worker(0);
  EXPECT_NE(worker_log.find("rejected a data connection from 127.0.0.1"), std::string::npos)
      << worker_log;
  EXPECT_NE(worker_log.find("wrong magic"), std::string::npos) << worker_log;
  EXPECT_NE(worker_log.find("exceeds the limit"), std::string::npos) << worker_log;
  const std::string coordinator_log = cluster.cluster->log_of_coordinator();
  EXPECT_NE(coordinator_log.find("claims 4294967295 bytes; the limit is 1048576"),
            std::string::npos)
      << coordinator_log;
  EXPECT_NE(coordinator_log.find("rejected a connection from"), std::string::npos)
      << coordinator_log;
  expect_allreduce_works(cluster);
}

}  // namespace
}  // namespace gradsync
