// The engine runs a subgroup's op (ExecuteOptions::members) between its members only: in every
// shape a subgroup may take, beside other ranks' ops, and without leaving anything in a channel
// of a rank outside it, whatever becomes of the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <thread>

#include "collective/algorithms.h"
#include "collective/subgroup.h"
#include "engine/executor.h"
#include "support/memory_channels.h"
#include "support/tensor_values.h"

namespace gradsync::engine {
namespace {

using gradsync::testing::Bytes;

constexpr std::uint64_t kJob = 7;

std::vector<PeerMesh> memory_meshes(gradsync::testing::MemoryNetwork& network, int p) {
  std::vector<PeerMesh> meshes;
  for (int r = 0; r < p; ++r) meshes.emplace_back(r, p, 1, network.channels_of(r));
  return meshes;
}

void on_every_rank(int p, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) threads.emplace_back(body, r);
  for (auto& thread : threads) thread.join();
}

// An op of stream `stream` at `place`, over `members` (empty: every rank).
ExecuteOptions options_for(const OpShape& shape, Algorithm algorithm, std::uint64_t stream,
                           std::uint64_t place, std::vector<int> members) {
  ExecuteOptions options;
  options.descriptor = {shape.collective,
                        DataType::f32,
                        ReduceOp::sum,
                        algorithm,
                        static_cast<std::uint32_t>(shape.root),
                        shape.count};
  options.op = {kJob, stream, place};
  options.segment_bytes = 64;
  options.deadline = net::Deadline::after(std::chrono::seconds(20));
  options.members = std::move(members);
  return options;
}

// Where `rank` stands in `members`; -1: not there.
int position_of(const std::vector<int>& members, int rank) {
  const auto found = std::find(members.begin(), members.end(), rank);
  return found == members.end() ? -1 : static_cast<int>(found - members.begin());
}

// Every member of each subgroup all-reduces (f32 sum) with `algorithm`, the subgroups at once,
// each its own stream; then every rank all-reduces together. Checks every result against its
// closed form, the subgroup's member r contributing as rank r of a group of its size.
void expect_subgroups_then_the_group(int p, const std::vector<std::vector<int>>& subgroups,
                                     Algorithm algorithm, std::uint64_t count) {
  gradsync::testing::MemoryNetwork network(p, {256, 100});
  std::vector<PeerMesh> meshes = memory_meshes(network, p);
  std::vector<Status> statuses(p);
  std::vector<Bytes> results(p);
  std::vector<Status> whole_statuses(p);
  std::vector<Bytes> whole_results(p);
  on_every_rank(p, [&](int rank) {
    for (std::size_t group = 0; group < subgroups.size(); ++group) {
      const std::vector<int>& members = subgroups[group];
      const int position = position_of(members, rank);
      if (position < 0) continue;
      const int size = static_cast<int>(members.size());
      const OpShape shape{Collective::allreduce, size, count, 4};
      results[rank] =
          gradsync::testing::contribution(DataType::f32, ReduceOp::sum, position, count);
      statuses[rank] =
          execute(build_schedule(shape, algorithm, position), {results[rank].data(), nullptr},
                  meshes[rank], options_for(shape, algorithm, 10 + group, 1, members));
    }
    const OpShape whole{Collective::allreduce, p, count, 4};
    whole_results[rank] =
        gradsync::testing::contribution(DataType::f32, ReduceOp::sum, rank, count);
    whole_statuses[rank] =
        execute(build_schedule(whole, Algorithm::ring, rank), {whole_results[rank].data(), nullptr},
                meshes[rank], options_for(whole, Algorithm::ring, 1, 1, {}));
  });
  for (const std::vector<int>& members : subgroups) {
    const Bytes expected = gradsync::testing::expected_reduction(
        DataType::f32, ReduceOp::sum, static_cast<int>(members.size()), count);
    for (const int rank : members) {
      ASSERT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank].to_string();
      EXPECT_EQ(results[rank], expected) << "rank " << rank << " of " << describe_members(members);
    }
  }
  const Bytes expected =
      gradsync::testing::expected_reduction(DataType::f32, ReduceOp::sum, p, count);
  for (int rank = 0; rank < p; ++rank) {
    ASSERT_TRUE(whole_statuses[rank].ok())
        << "rank " << rank << ": " << whole_statuses[rank].to_string();
    EXPECT_EQ(whole_results[rank], expected) << "rank " << rank << " in the whole group";
  }
}

TEST(ExecutorSubgroup, EveryShapeOfSubgroupReducesOnlyItsMembersValues) {
  std::mt19937 random(42);
  for (int p = 1; p <= 8; ++p) {
    std::vector<int> every(p);
    std::iota(every.begin(), every.end(), 0);
    std::vector<int> reversed(every.rbegin(), every.rend());
    std::vector<int> even;
    for (int rank = 0; rank < p; rank += 2) even.push_back(rank);
    std::vector<int> shuffled = every;
    std::shuffle(shuffled.begin(), shuffled.end(), random);
    shuffled.resize(1 + random() % p);
    for (const auto& members : {std::vector<int>{p - 1}, reversed, even, shuffled}) {
      for (const Algorithm algorithm :
           {Algorithm::ring, Algorithm::hypercube, Algorithm::tree, Algorithm::halving_doubling}) {
        for (const std::uint64_t count : {std::uint64_t{0}, std::uint64_t{3}, std::uint64_t{97}}) {
          SCOPED_TRACE("p = " + std::to_string(p) + ", " + describe_members(members) + ", " +
                       std::string(name(algorithm)) + ", " + std::to_string(count) + " values");
          expect_subgroups_then_the_group(p, {members}, algorithm, count);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(ExecutorSubgroup, DisjointSubgroupsRunAtOnceEachWithItsOwnMembers) {
  expect_subgroups_then_the_group(6, {{4, 1, 3}, {0, 5, 2}}, Algorithm::ring, 1000);
  expect_subgroups_then_the_group(5, {{0, 2}, {4, 3}, {1}}, Algorithm::hypercube, 10);
}

// A member that cannot start a subgroup's op tells the other members, and no one else: a rank
// outside the subgroup would find the news of an op it never runs ahead of the next op's data.
TEST(ExecutorSubgroup, AFailureIsToldToTheMembersOnly) {
  constexpr int p = 4;
  const std::vector<int> members = {3, 1};
  gradsync::testing::MemoryNetwork network(p, {});
  std::vector<PeerMesh> meshes = memory_meshes(network, p);
  std::vector<Status> subgroup_statuses(p);
  std::vector<Status> statuses(p);
  std::vector<Bytes> results(p);
  on_every_rank(p, [&](int rank) {
    const OpShape pair{Collective::allreduce, 2, 16, 4};
    if (rank == 3) {
      announce_failure(meshes[rank], options_for(pair, Algorithm::ring, 2, 1, members),
                       Status(ErrorCode::invalid_argument, "rank 3's request is wrong"));
    } else if (rank == 1) {
      Bytes data(64);
      subgroup_statuses[rank] =
          execute(build_schedule(pair, Algorithm::ring, 1), {data.data(), nullptr}, meshes[rank],
                  options_for(pair, Algorithm::ring, 2, 1, members));
    }
    const OpShape whole{Collective::allreduce, p, 16, 4};
    results[rank] = gradsync::testing::contribution(DataType::f32, ReduceOp::sum, rank, 16);
    statuses[rank] =
        execute(build_schedule(whole, Algorithm::ring, rank), {results[rank].data(), nullptr},
                meshes[rank], options_for(whole, Algorithm::ring, 1, 1, {}));
  });
  EXPECT_EQ(subgroup_statuses[1].code(), ErrorCode::invalid_argument);
  EXPECT_NE(subgroup_statuses[1].message().find("rank 3's request is wrong"), std::string::npos)
      << subgroup_statuses[1].to_string();
  const Bytes expected = gradsync::testing::expected_reduction(DataType::f32, ReduceOp::sum, p, 16);
  for (int rank = 0; rank < p; ++rank) {
    ASSERT_TRUE(statuses[rank].ok()) << "rank " << rank << ": " << statuses[rank].to_string();
    EXPECT_EQ(results[rank], expected) << rank;
  }
}

}  // namespace
}  // namespace gradsync::engine
