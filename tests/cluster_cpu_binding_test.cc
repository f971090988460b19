// Workers bound to CPUs (gradsync local's default) tell their clients where they run, and a client
// thread can bind beside its daemon; unbound workers leave every thread where it was.
#include <gtest/gtest.h>

#include <thread>

#include "net/cpu_affinity.h"
#include "support/cluster.h"

namespace gradsync {
namespace {

std::unique_ptr<cli::LocalCluster> start_local(int workers, bool bind_cpus) {
  cli::LocalClusterOptions options;
  options.workers = workers;
  options.bind_cpus = bind_cpus;
  options.daemon_path = GRADSYNC_DAEMON;
  std::unique_ptr<cli::LocalCluster> cluster;
  const Status status = cli::LocalCluster::start(options, cluster);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return cluster;
}

// What a fresh thread may run on after asking to run beside `client`'s daemon.
std::vector<int> cpus_of_a_thread_beside(Client& client, bool& bound) {
  std::vector<int> cpus;
  std::thread([&] {
    bound = client.bind_thread_beside_daemon();
    cpus = net::allowed_cpus();
  }).join();
  return cpus;
}

TEST(ClusterCpuBinding, WorkerRRunsOnCpuRModTheCountAndItsClientThreadCanJoinIt) {
  const std::vector<int> cpus = net::allowed_cpus();
  const int workers = 3;
  auto cluster = start_local(workers, true);
  ASSERT_TRUE(cluster);
  for (int rank = 0; rank < workers; ++rank) {
    Client client = Client::connect(cluster->sockets()[rank]);
    const std::vector<int> expected = {cpus[rank % cpus.size()]};
    EXPECT_EQ(client.daemon_cpus(), expected) << "rank " << rank;
    bool bound = false;
    EXPECT_EQ(cpus_of_a_thread_beside(client, bound), cpus.size() > 1 ? expected : cpus);
    EXPECT_EQ(bound, cpus.size() > 1) << "rank " << rank;
  }
  EXPECT_EQ(net::allowed_cpus(), cpus);  // only the thread that asked was bound
}

TEST(ClusterCpuBinding, UnboundWorkersReportEveryCpuAndLeaveClientThreadsAlone) {
  const std::vector<int> cpus = net::allowed_cpus();
  auto cluster = start_local(2, false);
  ASSERT_TRUE(cluster);
  for (const std::string& socket : cluster->sockets()) {
    Client client = Client::connect(socket);
    EXPECT_EQ(client.daemon_cpus(), cpus);
    bool bound = true;
    EXPECT_EQ(cpus_of_a_thread_beside(client, bound), cpus);
    EXPECT_FALSE(bound);
  }
}

}  // namespace
}  // namespace gradsync
