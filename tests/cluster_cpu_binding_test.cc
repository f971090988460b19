// Workers bound to CPUs (gradsync local's default) tell their clients where they run, and a client
// thread can bind beside its daemon; unbound workers leave every thread where it was. Workers
// busy-poll by default only while each can have a CPU of its own.
#include <gtest/gtest.h>

#include <thread>

#include "net/cpu_affinity.h"
#include "support/cluster.h"

namespace gradsync {
namespace {

std::unique_ptr<cli::LocalCluster> start_local(int workers, bool bind_cpus, int spin_us = -1) {
  cli::LocalClusterOptions options;
  options.workers = workers;
  options.bind_cpus = bind_cpus;
  options.spin_us = spin_us;
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

TEST(ClusterCpuBinding, WorkersSpinOnlyWhileEachCanHaveACpuOfItsOwn) {
  EXPECT_EQ(cli::spin_us_for(1, 1), cli::kSpinUsWithOwnCpu);
  EXPECT_EQ(cli::spin_us_for(2, 2), cli::kSpinUsWithOwnCpu);
  EXPECT_EQ(cli::spin_us_for(3, 2), 0);
  EXPECT_EQ(cli::spin_us_for(1, 0), 0);  // the CPUs could not be read: no spinning
}

// The worker logs its settings once at start-up.
bool worker_logged(cli::LocalCluster& cluster, int rank, const std::string& setting) {
  return cluster.log_of_worker(rank).find(setting) != std::string::npos;
}

TEST(ClusterCpuBinding, GradsyncLocalPassesTheSpinItChoseOrWasGivenToEveryWorker) {
  const int cpus = static_cast<int>(net::allowed_cpus().size());
  const std::string spinning = "spin_us=" + std::to_string(cli::kSpinUsWithOwnCpu) + " ";
  {
    auto cluster = start_local(cpus, true);
    ASSERT_TRUE(cluster);
    for (int rank = 0; rank < cpus; ++rank) {
      EXPECT_TRUE(worker_logged(*cluster, rank, spinning)) << cluster->log_of_worker(rank);
    }
  }
  {
    auto cluster = start_local(cpus + 1, true);
    ASSERT_TRUE(cluster);
    for (int rank = 0; rank <= cpus; ++rank) {
      EXPECT_TRUE(worker_logged(*cluster, rank, "spin_us=0 ")) << cluster->log_of_worker(rank);
    }
  }
  auto told = start_local(1, true, 7);
  ASSERT_TRUE(told);
  EXPECT_TRUE(worker_logged(*told, 0, "spin_us=7 ")) << told->log_of_worker(0);
}

}  // namespace
}  // namespace gradsync
