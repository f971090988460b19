#include "support/cluster.h"

#include <gtest/gtest.h>

#include <thread>

#include "cli/connect_clients.h"
#include "support/tensor_values.h"

namespace gradsync::testing {

TestCluster start_cluster(int workers, const std::string& algorithm, std::size_t segment_bytes,
                          const std::vector<std::string>& coordinator_flags) {
  cli::LocalClusterOptions options;
  options.workers = workers;
  options.algorithm = algorithm;
  options.segment_bytes = segment_bytes;
  options.coordinator_flags = coordinator_flags;
  return start_cluster(options);
}

TestCluster start_cluster(cli::LocalClusterOptions options) {
  TestCluster result;
  options.daemon_path = GRADSYNC_DAEMON;
  const Status status = cli::LocalCluster::start(options, result.cluster);
  EXPECT_TRUE(status.ok()) << status.to_string();
  if (!status.ok()) return result;
  result.clients = cli::connect_clients(result.cluster->rank_sockets(), std::chrono::seconds(30));
  return result;
}

TestCluster start_hosts(const std::vector<int>& local_ranks,
                        std::vector<std::string> coordinator_flags) {
  cli::LocalClusterOptions options;
  options.workers = static_cast<int>(local_ranks.size());
  options.local_ranks = local_ranks;
  options.segment_bytes = 64 << 10;
  coordinator_flags.insert(coordinator_flags.end(), {"--calibration-ms", "0"});
  options.coordinator_flags = std::move(coordinator_flags);
  return start_cluster(options);
}

void expect_client_error(const std::function<void()>& call, ErrorCode code,
                         const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one saying \"" << text << "\"";
  } catch (const ClientError& error) {
    EXPECT_EQ(error.code(), code) << error.what();
    EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
  }
}

void on_every_rank(TestCluster& cluster, const std::function<void(int, Client&)>& body) {
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < cluster.clients.size(); ++r) {
    threads.emplace_back([&, r] { body(static_cast<int>(r), cluster.clients[r]); });
  }
  for (auto& thread : threads) thread.join();
}

void expect_every_rank_still_serves(TestCluster& cluster) {
  cluster.clients.clear();
  cluster.clients = cli::connect_clients(cluster.cluster->rank_sockets(), std::chrono::seconds(30));
  const int p = static_cast<int>(cluster.clients.size());
  on_every_rank(cluster, [&](int rank, Client& client) {
    auto data = contribution(DataType::f32, ReduceOp::sum, rank, 1000);
    client.allreduce(data.data(), 1000, DataType::f32);
    EXPECT_EQ(data, expected_reduction(DataType::f32, ReduceOp::sum, p, 1000));
  });
}

}  // namespace gradsync::testing
