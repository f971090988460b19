// How a real group's members change without a restart of the others: a group that may shrink
// (coordinator --min-workers) leaves the survivors of a worker killed without a replacement a
// smaller generation, and grows back when a worker joins; a spare that joined a complete group
// waits, past its join timeout while its coordinator keeps telling it that it is one, and takes a
// lost rank's place at once.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "support/cluster.h"
#include "support/daemon_processes.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

// Runs an all-reduce on each of `clients` (one thread each) until it has a right result for the
// group it then has, taking note of a changed group and trying again after any other failure.
void allreduce_until_served(std::vector<Client*> clients) {
  std::vector<std::thread> threads;
  for (Client* client : clients) {
    threads.emplace_back([client] {
      for (int attempt = 0; attempt < 2000; ++attempt) {
        Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, client->rank(), 321);
        try {
          client->allreduce(data.data(), 321, DataType::f32);
          EXPECT_EQ(data, testing::expected_reduction(DataType::f32, ReduceOp::sum,
                                                      client->world_size(), 321));
          return;
        } catch (const ClientError&) {
          client->group();
        }
      }
      ADD_FAILURE() << "rank " << client->rank() << " never got a right result";
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(ClusterMembership, TheGroupShrinksToTheSurvivorsAndGrowsWhenAWorkerJoins) {
  testing::TestCluster cluster =
      testing::start_cluster(3, "", 0, {"--min-workers", "2", "--heartbeat-timeout-ms", "1500"});
  ASSERT_EQ(cluster.clients.size(), 3u);
  cli::LocalCluster& group = *cluster.cluster;
  ::kill(group.worker(2).pid(), SIGKILL);
  group.worker(2).wait();
  allreduce_until_served({&cluster.clients[0], &cluster.clients[1]});
  for (const int rank : {0, 1}) {
    EXPECT_EQ(cluster.clients[rank].world_size(), 2);
    EXPECT_EQ(cluster.clients[rank].rank(), rank);
    EXPECT_EQ(cluster.clients[rank].generation(), 2u);
  }

  const std::string name = "resize-newcomer";
  cli::ChildProcess newcomer = testing::start_worker(group.coordinator_address(),
                                                     {"--secret-file", group.secret_file()}, name);
  testing::wait_for_log(testing::log_path(name), std::regex("(serving clients)"));
  Client third = Client::connect(::testing::TempDir() + "/" + name + ".sock");
  allreduce_until_served({&cluster.clients[0], &cluster.clients[1], &third});
  for (Client* client : {&cluster.clients[0], &cluster.clients[1], &third}) {
    EXPECT_EQ(client->world_size(), 3);
    EXPECT_EQ(client->generation(), 3u);
  }
  EXPECT_EQ(third.rank(), 2);
  EXPECT_EQ(newcomer.stop(), 0);
}

TEST(ClusterMembership, ASpareTakesALostRanksPlaceAtOnce) {
  testing::TestCluster cluster = testing::start_cluster(2);
  ASSERT_EQ(cluster.clients.size(), 2u);
  cli::LocalCluster& group = *cluster.cluster;
  const std::string name = "spare";
  cli::ChildProcess spare = testing::start_worker(
      group.coordinator_address(),
      {"--secret-file", group.secret_file(), "--join-timeout-ms", "1500"}, name);
  testing::wait_for_log(testing::log_path(name), std::regex("(waiting as a spare)"));
  std::this_thread::sleep_for(std::chrono::milliseconds(4000));
  ASSERT_TRUE(spare.running()) << testing::read_file(testing::log_path(name));
  ::kill(group.worker(1).pid(), SIGKILL);
  group.worker(1).wait();
  testing::wait_for_log(testing::log_path(name), std::regex("(serving clients)"));
  Client replacement = Client::connect(::testing::TempDir() + "/" + name + ".sock");
  allreduce_until_served({&cluster.clients[0], &replacement});
  EXPECT_EQ(cluster.clients[0].generation(), 2u);
  EXPECT_EQ(replacement.world_size(), 2);
  EXPECT_EQ(replacement.rank(), 1);
  EXPECT_EQ(spare.stop(), 0);
}

}  // namespace
}  // namespace gradsync
