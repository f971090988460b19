// What a real cluster does when a peer dies, disagrees or talks nonsense: every survivor gets a
// clear error within a bounded time, no daemon crashes, and the next correct op succeeds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "engine/frame.h"
#include "net/socket.h"
#include "support/cluster.h"
#include "support/daemon_processes.h"
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

// An op large enough that the kill comes well inside it, and small enough that what a survivor
// still has to do of it once its peer is gone takes no more than a fraction of the bound: a 64 MiB
// ring op under ThreadSanitizer reaches its next wait for the peer seconds after the kill, so a
// sanitized build sizes it down as its ops slow down.
#ifdef GRADSYNC_SANITIZED
constexpr std::uint64_t kKilledOpCount = 1 << 20;  // 4 MiB of f32
#else
constexpr std::uint64_t kKilledOpCount = 16 << 20;  // 64 MiB of f32
#endif

TEST(ClusterFailures, AKilledWorkerIsNamedToEverySurvivorWithinSeconds) {
  constexpr int kRanks = 4;
  constexpr int kVictim = 2;
  constexpr std::uint64_t kCount = kKilledOpCount;
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

  // The coordinator ended generation 1 and the survivors joined generation 2, which forms once a
  // replacement for rank 2 joins (the group's size is fixed). An op a survivor submitted
  // meanwhile fails with GROUP_CHANGED, naming its new rank; once every client has taken note of
  // the new group, ops succeed again.
  const std::string name = "replacement-rank2";
  cli::ChildProcess replacement =
      testing::start_worker(cluster.cluster->coordinator_address(),
                            {"--rank", "2", "--secret-file", cluster.cluster->secret_file()}, name);
  // Until then an op fails at once, saying that the group is forming its next generation.
  std::vector<std::string> changes(kRanks);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (rank == kVictim) return;
    Bytes small(40);
    for (int attempt = 0; attempt < 1000 && changes[rank].empty(); ++attempt) {
      try {
        client.allreduce(small.data(), 10, DataType::f32);
        changes[rank] = "an op succeeded before the client took note of the new group";
      } catch (const ClientError& error) {
        if (error.code() == ErrorCode::group_changed) {
          changes[rank] = error.what();
        } else {
          EXPECT_NE(std::string(error.what()).find("the group is forming the next"),
                    std::string::npos)
              << error.what();
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    }
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    if (rank == kVictim) continue;
    EXPECT_NE(changes[rank].find("from generation 1 to 2: this is now rank " +
                                 std::to_string(rank) + " of 4"),
              std::string::npos)
        << "rank " << rank << ": " << changes[rank];
  }
  testing::wait_for_log(testing::log_path(name), std::regex("(serving clients)"));
  cluster.clients[kVictim] = Client::connect(::testing::TempDir() + "/" + name + ".sock");
  for (Client& client : cluster.clients) client.group();
  EXPECT_EQ(cluster.clients[0].generation(), 2u);
  expect_allreduce_works(cluster);
  std::printf(
      "the first op of generation 2 succeeded %lld ms after the kill\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed_at).count()));
  EXPECT_EQ(replacement.stop(), 0);
}

// Runs an all-reduce on every rank until one succeeds: an op that fails with GROUP_CHANGED is
// followed by taking note of the new group, one that fails otherwise (the group is still
// forming) by another try. Returns when every rank has a right result.
void allreduce_until_the_group_serves(testing::TestCluster& cluster) {
  const int p = static_cast<int>(cluster.clients.size());
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (int attempt = 0; attempt < 2000; ++attempt) {
      Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, 777);
      try {
        client.allreduce(data.data(), 777, DataType::f32);
        EXPECT_EQ(data, testing::expected_reduction(DataType::f32, ReduceOp::sum, p, 777));
        return;
      } catch (const ClientError& error) {
        if (error.code() == ErrorCode::group_changed) {
          client.group();
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }
    }
    ADD_FAILURE() << "rank " << rank << " never got a right result";
  });
}

// A worker stopped (SIGSTOP) for longer than the heartbeat timeout is dropped: the others' ops
// fail naming it, and the group waits for its next generation. Once the worker resumes it sees
// that it was dropped and joins again as the rank it held; the group serves every rank again.
TEST(ClusterFailures, AStalledWorkerIsDroppedAndJoinsAgainWhenItResumes) {
  constexpr int kRanks = 3;
  cli::LocalClusterOptions cluster_options;
  cluster_options.workers = kRanks;
  cluster_options.coordinator_flags = {"--heartbeat-timeout-ms", "1500"};
  // Shorter than the stop: a stop of the whole process is no stuck op thread (OpThreadWatch).
  cluster_options.worker_flags = {"--stall-timeout-ms", "1000"};
  testing::TestCluster cluster = testing::start_cluster(cluster_options);
  expect_allreduce_works(cluster);
  const pid_t stalled = cluster.cluster->worker(1).pid();
  ASSERT_EQ(::kill(stalled, SIGSTOP), 0);
  const auto stopped_at = Clock::now();
  std::vector<std::string> errors(kRanks);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (rank == 1) return;
    Bytes data(40);
    OpOptions options;
    options.timeout = std::chrono::seconds(20);
    try {
      client.allreduce(data.data(), 10, DataType::f32, options);
    } catch (const ClientError& error) {
      errors[rank] = error.what();
    }
  });
  for (const int rank : {0, 2}) {
    EXPECT_NE(errors[rank].find("rank 1"), std::string::npos) << rank << ": " << errors[rank];
  }
  std::this_thread::sleep_until(stopped_at + std::chrono::milliseconds(2500));
  const auto resumed_at = Clock::now();
  ASSERT_EQ(::kill(stalled, SIGCONT), 0);
  allreduce_until_the_group_serves(cluster);
  std::printf("every rank served again %lld ms after SIGCONT\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - resumed_at)
                      .count()));
  for (Client& client : cluster.clients) EXPECT_EQ(client.generation(), 2u);
  EXPECT_EQ(cluster.clients[1].rank(), 1);
  EXPECT_NE(cluster.cluster->log_of_worker(1).find("generation 1 ended"), std::string::npos);
  EXPECT_EQ(cluster.cluster->log_of_worker(1).find("leaving the generation"), std::string::npos)
      << cluster.cluster->log_of_worker(1);
}

// A worker whose op thread is stuck while its control thread still beats (here only its op
// thread is stopped, by ptrace) leaves its generation once its op thread is --stall-timeout-ms
// past what it may take: the others' ops fail naming it within seconds, not at their deadlines.
// Once its op thread runs again it joins the next generation, and the group serves every rank.
TEST(ClusterFailures, ARankWhoseOpThreadIsStuckLeavesAndTheGroupGoesOn) {
  constexpr auto kOpTimeout = std::chrono::seconds(20);
  cli::LocalClusterOptions options;
  options.workers = 3;
  options.worker_flags = {"--stall-timeout-ms", "1000"};
  testing::TestCluster cluster = testing::start_cluster(options);
  ASSERT_EQ(cluster.clients.size(), 3u);
  expect_allreduce_works(cluster);
  // The worker's main thread is its op thread; the control thread beats on.
  const pid_t op_thread = cluster.cluster->worker(1).pid();
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, op_thread, nullptr, nullptr), 0) << std::strerror(errno);
  ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, op_thread, nullptr, nullptr), 0) << std::strerror(errno);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(op_thread, &wait_status, 0), op_thread);
  const auto stuck_at = Clock::now();
  std::vector<std::string> errors(3);
  std::vector<Clock::duration> failed_after(3);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (rank == 1) return;
    Bytes data(40);
    OpOptions op_options;
    op_options.timeout = kOpTimeout;
    try {
      client.allreduce(data.data(), 10, DataType::f32, op_options);
    } catch (const ClientError& error) {
      errors[rank] = error.what();
    }
    failed_after[rank] = Clock::now() - stuck_at;
  });
  ASSERT_EQ(::ptrace(PTRACE_DETACH, op_thread, nullptr, nullptr), 0) << std::strerror(errno);
  for (const int rank : {0, 2}) {
    EXPECT_NE(errors[rank].find("rank 1 was lost (it left: its op thread has answered nothing for"),
              std::string::npos)
        << "rank " << rank << ": " << errors[rank];
    // Failed by the rank's leaving, long before their own deadline would have failed them.
    EXPECT_LT(failed_after[rank], kOpTimeout / 2) << "rank " << rank;
  }
  allreduce_until_the_group_serves(cluster);
  for (Client& client : cluster.clients) EXPECT_EQ(client.generation(), 2u);
}

// With --no-rejoin a worker whose generation ends exits with status 2, saying why, for a
// supervisor that restarts the whole job: the survivors when the stalled one is dropped, the
// stalled one as soon as it resumes.
TEST(ClusterFailures, WithoutRejoiningEveryWorkerOfAnEndedGenerationExitsSayingWhy) {
  cli::LocalClusterOptions options;
  options.workers = 3;
  options.coordinator_flags = {"--heartbeat-timeout-ms", "1500"};
  options.worker_flags = {"--no-rejoin"};
  testing::TestCluster cluster = testing::start_cluster(options);
  ASSERT_EQ(cluster.clients.size(), 3u);
  cli::LocalCluster& group = *cluster.cluster;
  ASSERT_EQ(::kill(group.worker(1).pid(), SIGSTOP), 0);
  for (const int survivor : {0, 2}) {
    EXPECT_EQ(group.worker(survivor).wait(), 2) << "rank " << survivor;
    EXPECT_NE(group.log_of_worker(survivor).find(
                  "generation 1 ended (rank 1 was lost (no heartbeat for 1500 ms)); not joining "
                  "again (--no-rejoin)"),
              std::string::npos)
        << group.log_of_worker(survivor);
  }
  ASSERT_EQ(::kill(group.worker(1).pid(), SIGCONT), 0);
  EXPECT_EQ(group.worker(1).wait(), 2);
  EXPECT_NE(group.log_of_worker(1).find("not joining again (--no-rejoin)"), std::string::npos)
      << group.log_of_worker(1);
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
