// Jobs on real daemons (docs/clients.md, "Jobs"): ops pair only within a job, whatever order its
// clients reach the daemons in; a job that collides with another fails on every rank saying so,
// within its deadline; and a job that ends, dies or abandons its ops leaves nothing that harms the
// next one.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/gradsync_client.h"
#include "support/cluster.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

Client client_of(testing::TestCluster& cluster, int rank, const std::string& job) {
  return Client::connect(cluster.cluster->sockets()[rank],
                         ConnectOptions{std::chrono::seconds(10), {}, job, {}, {}});
}

// Waits until the daemon `asker` is connected to serves `job`.
void await_holder(Client& asker, const std::string& job) {
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (asker.status().job != job) {
    ASSERT_LT(Clock::now(), give_up) << "the daemon never served " << job;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

// One all-reduce of `count` copies of `value`, as it ended.
struct Outcome {
  std::optional<float> sum;  // the first element, if the op succeeded
  std::string error;
  Clock::duration took{};
};

Outcome allreduce(Client& client, float value, milliseconds timeout, std::size_t count = 1000) {
  std::vector<float> data(count, value);
  OpOptions options;
  options.timeout = timeout;
  Outcome outcome;
  const auto start = Clock::now();
  try {
    client.allreduce(data.data(), data.size(), DataType::f32, options);
    outcome.sum = data.front();
  } catch (const ClientError& error) {
    outcome.error = error.what();
  }
  outcome.took = Clock::now() - start;
  return outcome;
}

double seconds_of(Clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

// A fresh job's first op succeeds on every rank, with the right sum.
void expect_a_new_job_runs(testing::TestCluster& cluster, const std::string& job) {
  std::vector<Client> clients;
  for (int rank = 0; rank < 2; ++rank) clients.push_back(client_of(cluster, rank, job));
  std::vector<Outcome> outcomes(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      outcomes[rank] = allreduce(clients[rank], rank == 0 ? 1.0f : 2.0f, std::chrono::seconds(10));
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (const Outcome& outcome : outcomes) {
    EXPECT_EQ(outcome.sum, 3.0f) << job << "'s first op: " << outcome.error;
    EXPECT_LT(outcome.took, std::chrono::seconds(2)) << job;
  }
}

TEST(ClusterJobs, TwoJobsThatReachTheDaemonsInOppositeOrdersAreNeverSummedIntoEachOther) {
  testing::TestCluster cluster = testing::start_cluster(2);
  cluster.clients.clear();
  Client a0 = client_of(cluster, 0, "job A");
  Client b1 = client_of(cluster, 1, "job B");
  Client a1 = client_of(cluster, 1, "job A");
  Client b0 = client_of(cluster, 0, "job B");
  // Job A reaches daemon 0 first and job B daemon 1: each holds one daemon.
  std::vector<Outcome> outcomes(4);
  std::vector<std::thread> ops;
  const milliseconds timeout(5000);
  ops.emplace_back([&] { outcomes[0] = allreduce(a0, 1.0f, timeout); });
  ops.emplace_back([&] { outcomes[1] = allreduce(b1, 100.0f, timeout); });
  await_holder(a1, "job B");
  await_holder(b0, "job A");
  ops.emplace_back([&] { outcomes[2] = allreduce(a1, 1.0f, timeout); });
  ops.emplace_back([&] { outcomes[3] = allreduce(b0, 100.0f, timeout); });
  for (std::thread& op : ops) op.join();
  const char* names[] = {"job A on rank 0", "job B on rank 1", "job A on rank 1",
                         "job B on rank 0"};
  for (int index = 0; index < 4; ++index) {
    const Outcome& outcome = outcomes[index];
    // An op either fails or has its own job's sum: never one with the other job's values in it.
    if (outcome.sum) {
      EXPECT_EQ(*outcome.sum, index % 2 == 0 ? 2.0f : 200.0f) << names[index];
      continue;
    }
    std::printf("%s: failed after %.3f s: %s\n", names[index], seconds_of(outcome.took),
                outcome.error.c_str());
    EXPECT_LT(outcome.took, timeout + std::chrono::seconds(1)) << names[index];
    if (index < 2) {
      // It waited for the other daemon, which ran the other job's op meanwhile.
      EXPECT_NE(outcome.error.find("ran ops of another job meanwhile"), std::string::npos)
          << names[index] << ": " << outcome.error;
      continue;
    }
    // Refused where the other job holds the daemon, naming both.
    EXPECT_NE(outcome.error.find("'job A'"), std::string::npos) << names[index] << outcome.error;
    EXPECT_NE(outcome.error.find("'job B'"), std::string::npos) << names[index] << outcome.error;
  }
  for (Client* client : {&a0, &b1, &a1, &b0}) client->close();
  expect_a_new_job_runs(cluster, "job C");
}

// A rank's process runs ops that the other ranks never see (it ran ahead, or ran alone) and
// exits: the next job's first op succeeds on every rank.
TEST(ClusterJobs, OpsOfALoneRankLeaveNothingThatHarmsTheNextJob) {
  testing::TestCluster cluster = testing::start_cluster(2);
  cluster.clients.clear();
  for (const int lone_ops : {1, 5, 1000}) {
    const std::string lone_job = "lone " + std::to_string(lone_ops);
    {
      Client lone = client_of(cluster, 0, lone_job);
      OpOptions options;
      options.timeout = milliseconds(2);
      std::vector<std::vector<float>> data(lone_ops, std::vector<float>(4, 1.0f));
      std::vector<Handle> handles;
      for (std::vector<float>& tensor : data) {
        handles.push_back(
            lone.allreduce_async(tensor.data(), tensor.size(), DataType::f32, options));
      }
      int failed = 0;
      for (Handle& handle : handles) {
        try {
          handle.wait();
        } catch (const ClientError&) {
          ++failed;
        }
      }
      EXPECT_EQ(failed, lone_ops) << "no op of a lone rank can succeed";
    }
    expect_a_new_job_runs(cluster, "after " + lone_job);
  }
}

// A client that leaves while its op waits for the other ranks abandons it: the op thread drops it
// at once, so the next client's hello is answered at once, and the next job runs.
TEST(ClusterJobs, AnAbandonedOpHoldsUpNeitherTheNextHelloNorTheNextJob) {
  testing::TestCluster cluster = testing::start_cluster(2);
  cluster.clients.clear();
  {
    Client abandoning = client_of(cluster, 0, "abandoning");
    OpOptions options;
    options.timeout = std::chrono::seconds(60);
    std::vector<float> data(4, 1.0f);
    Handle handle = abandoning.allreduce_async(data.data(), data.size(), DataType::f32, options);
    std::this_thread::sleep_for(milliseconds(300));  // it waits for rank 1 by now
  }
  const auto start = Clock::now();
  Client next = client_of(cluster, 0, "next");
  const auto hello = Clock::now() - start;
  std::printf("the hello after an abandoned op took %.1f ms\n",
              std::chrono::duration<double, std::milli>(hello).count());
  EXPECT_LT(hello, milliseconds(1000));
  next.close();
  expect_a_new_job_runs(cluster, "after the abandoned op");
}

// A rank's client leaves between ops: the other rank's op, which waits for it, fails at once,
// naming the rank whose client left, instead of at its timeout.
TEST(ClusterJobs, ARankWhoseClientLeavesFailsTheOthersOpAtOnceNamingIt) {
  testing::TestCluster cluster = testing::start_cluster(2);
  cluster.clients.clear();
  Client survivor = client_of(cluster, 0, "j");
  std::optional<Client> leaver = client_of(cluster, 1, "j");
  std::thread first([&] { allreduce(*leaver, 1.0f, std::chrono::seconds(10)); });
  EXPECT_EQ(allreduce(survivor, 1.0f, std::chrono::seconds(10)).sum, 2.0f);
  first.join();
  Clock::time_point left;
  std::thread leaving([&] {
    std::this_thread::sleep_for(milliseconds(300));
    left = Clock::now();
    leaver.reset();
  });
  const Outcome outcome = allreduce(survivor, 1.0f, std::chrono::seconds(30));
  const auto failed = Clock::now();
  leaving.join();
  EXPECT_FALSE(outcome.sum);
  EXPECT_NE(outcome.error.find("aborted: rank 1: rank 1's client (pid "), std::string::npos)
      << outcome.error;
  std::printf("the survivor's op failed %.3f s after the other rank's client left\n",
              seconds_of(failed - left));
  EXPECT_LT(failed - left, std::chrono::seconds(1));
}

TEST(ClusterJobs, ABadJobOrStreamNameIsRefusedSayingWhyAndTheDaemonServesOn) {
  testing::TestCluster cluster = testing::start_cluster(2);
  const std::string socket = cluster.cluster->sockets()[0];
  for (const auto& [job, stream] : {std::pair{std::string(300, 'j'), std::string()},
                                    std::pair{std::string("a\nb"), std::string()},
                                    std::pair{std::string("j"), std::string(257, 's')}}) {
    testing::expect_client_error(
        [&] {
          Client::connect(socket, ConnectOptions{std::chrono::seconds(5), {}, job, stream, {}});
        },
        ErrorCode::invalid_argument, "name is not at most 256 printable ASCII");
  }
  testing::expect_every_rank_still_serves(cluster);
}

}  // namespace
}  // namespace gradsync

namespace gradsync {
namespace {

// Every rank opens a client of one stream name per op, as a script that runs `gradsync submit`
// once per op does, and nothing makes the ranks wait for each other between ops: a rank that
// only sends to the root of a gather or reduce starts its next client's op while the root still
// reads the last one's frames. The stream's consecutive clients are keyed apart, so each op pairs
// with its own.
TEST(ClusterJobs, ConsecutiveClientsOfOneStreamNeverTakeEachOthersFrames) {
  constexpr int kRanks = 3;
  constexpr int kRounds = 20;
  constexpr std::uint64_t kCount = 30'000;
  testing::TestCluster cluster = testing::start_cluster(kRanks);
  const std::string job = cluster.clients.front().job();
  std::vector<std::vector<std::string>> failures(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      for (int round = 0; round < kRounds; ++round) {
        try {
          Client client = Client::connect(
              cluster.cluster->sockets()[rank],
              ConnectOptions{std::chrono::seconds(10), {}, job, "one client per op", {}});
          OpOptions to_root;
          to_root.timeout = std::chrono::seconds(10);
          std::vector<float> data(kCount, static_cast<float>(round + rank));
          client.reduce(data.data(), kCount, DataType::f32, to_root);
          const float sum = static_cast<float>(kRanks * round + kRanks * (kRanks - 1) / 2);
          if (rank == 0 && data.back() != sum) {
            failures[rank].push_back("round " + std::to_string(round) + ": reduce gave " +
                                     std::to_string(data.back()));
          }
        } catch (const ClientError& error) {
          failures[rank].push_back("round " + std::to_string(round) + ": " + error.what());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_TRUE(failures[rank].empty()) << "rank " << rank << ": " << failures[rank].size()
                                        << " failures, the first: " << failures[rank].front();
  }
}

}  // namespace
}  // namespace gradsync
