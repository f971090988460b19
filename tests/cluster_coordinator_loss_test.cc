// A real group whose coordinator dies: the running generation goes on without it (its data mesh
// needs none), a coordinator restarted on the same address takes the group back with no op lost
// and watches it as before, and a coordinator that stays away fails the ops once the workers'
// coordinator timeout has passed, saying why.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <thread>

#include "support/cluster.h"
#include "support/daemon_processes.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Bytes;

// What every rank's all-reduces came to while `during` ran beside them.
struct OpCounts {
  std::atomic<int> right{0};
  std::atomic<int> wrong{0};
  std::mutex mutex;
  std::vector<std::string> errors;
};

// Runs all-reduces on every rank, each checked, until `during` returns and `at_least` more have
// run. Every rank runs the same ops: the last is numbered once `during` has returned, from the
// highest any rank has begun (the others are at most one behind, as an all-reduce waits for all).
void allreduce_while(testing::TestCluster& cluster, const std::function<void()>& during,
                     int at_least, OpCounts& counts) {
  const int p = static_cast<int>(cluster.clients.size());
  std::atomic<int> highest{0};
  std::atomic<int> end{std::numeric_limits<int>::max()};
  std::thread beside([&] {
    during();
    end = highest + at_least;
  });
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    OpOptions options;
    options.timeout = std::chrono::seconds(20);
    for (int op = 0; op < end; ++op) {
      for (int seen = highest; seen < op && !highest.compare_exchange_weak(seen, op);) {
      }
      Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, 1000);
      try {
        client.allreduce(data.data(), 1000, DataType::f32, options);
        const bool right =
            data == testing::expected_reduction(DataType::f32, ReduceOp::sum, p, 1000);
        ++(right ? counts.right : counts.wrong);
      } catch (const ClientError& error) {
        std::lock_guard lock(counts.mutex);
        counts.errors.push_back("rank " + std::to_string(rank) + ": " + error.what());
        return;
      }
    }
  });
  beside.join();
}

// Waits up to `limit` for `condition`.
bool eventually(const std::function<bool()>& condition, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(ClusterCoordinatorLoss, ARestartedCoordinatorTakesTheRunningGroupBackAndNoOpFails) {
  constexpr int kRanks = 3;
  // No table versions: one unsettled when the coordinator dies ends the generation (table_gate.h).
  testing::TestCluster cluster = testing::start_cluster(
      kRanks, "", 0, {"--heartbeat-timeout-ms", "1500", "--explore-every", "0"});
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), kRanks);
  cli::LocalCluster& group = *cluster.cluster;
  OpCounts counts;
  allreduce_while(
      cluster,
      [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ::kill(group.coordinator().pid(), SIGKILL);
        group.coordinator().wait();
        // A while without a coordinator: the group runs on.
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        const Status restarted = group.restart_coordinator();
        EXPECT_TRUE(restarted.ok()) << restarted.to_string();
        EXPECT_TRUE(eventually(
            [&] {
              return group.log_of_coordinator().find("every rank of generation 1 is back") !=
                     std::string::npos;
            },
            std::chrono::seconds(10)))
            << group.log_of_coordinator();
      },
      20, counts);
  {
    std::lock_guard lock(counts.mutex);
    EXPECT_TRUE(counts.errors.empty()) << counts.errors.front();
  }
  EXPECT_EQ(counts.wrong, 0);
  std::printf("%d ops right across the coordinator's restart\n", counts.right.load());
  for (Client& client : cluster.clients) EXPECT_EQ(client.generation(), 1u);

  // The restarted coordinator watches the group it took back: a rank that stalls is dropped.
  ASSERT_EQ(::kill(group.worker(1).pid(), SIGSTOP), 0);
  std::vector<std::string> errors(kRanks);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (rank == 1) return;
    Bytes data(40);
    try {
      client.allreduce(data.data(), 10, DataType::f32);
    } catch (const ClientError& error) {
      errors[rank] = error.what();
    }
  });
  ASSERT_EQ(::kill(group.worker(1).pid(), SIGCONT), 0);
  for (const int rank : {0, 2}) {
    EXPECT_NE(errors[rank].find("rank 1 was lost (no heartbeat for 1500 ms)"), std::string::npos)
        << "rank " << rank << ": " << errors[rank];
  }
}

TEST(ClusterCoordinatorLoss, WithoutACoordinatorOpsFailOnceTheCoordinatorTimeoutHasPassed) {
  cli::LocalClusterOptions options;
  options.workers = 2;
  options.worker_flags = {"--coordinator-timeout-ms", "1500"};
  testing::TestCluster cluster = testing::start_cluster(options);
  ASSERT_EQ(cluster.clients.size(), 2u);
  // Taken before the kill: a worker may see its coordinator gone before the wait for the dead
  // process returns here, and its timeout counts from then.
  const auto killed_at = Clock::now();
  ::kill(cluster.cluster->coordinator().pid(), SIGKILL);
  cluster.cluster->coordinator().wait();
  // The first rank past its timeout ends its generation, which the other may see first as its
  // peer gone; past its own timeout it says why too.
  std::vector<std::string> errors(2);
  std::vector<Clock::duration> first_failure(2);
  std::vector<Clock::duration> said_why(2);
  std::atomic<int> right{0};
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    while (Clock::now() - killed_at < std::chrono::seconds(10)) {
      Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, 100);
      try {
        client.allreduce(data.data(), 100, DataType::f32);
        if (data == testing::expected_reduction(DataType::f32, ReduceOp::sum, 2, 100)) ++right;
      } catch (const ClientError& error) {
        if (errors[rank].empty()) first_failure[rank] = Clock::now() - killed_at;
        errors[rank] = error.what();
        if (errors[rank].find("took the group back within 1500 ms") != std::string::npos) {
          said_why[rank] = Clock::now() - killed_at;
          return;
        }
      }
    }
  });
  EXPECT_GT(right, 0);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(errors[rank].find("no coordinator at " + cluster.cluster->coordinator_address() +
                                " took the group back within 1500 ms"),
              std::string::npos)
        << "rank " << rank << ": " << errors[rank];
    EXPECT_GE(first_failure[rank], std::chrono::milliseconds(1500)) << "rank " << rank;
    EXPECT_LT(said_why[rank], std::chrono::milliseconds(4000)) << "rank " << rank;
  }
}

}  // namespace
}  // namespace gradsync
