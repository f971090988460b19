// `gradsync bench` under `gradsync local`, run as a process the way a user runs it: every row's
// result is checked for every collective, and rows up to 64 KiB take --small-iters timed
// iterations.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_command.h"

namespace gradsync {
namespace {

using testing::run_command;

const std::string kGradsync = GRADSYNC_CLI;

// Runs `gradsync bench FLAGS` under `gradsync local --workers WORKERS`; its JSON rows into `rows`.
testing::CommandResult run_bench(int workers, const std::string& flags, nlohmann::json& rows) {
  const std::string json_path = "/tmp/gradsync-bench-test-" + std::to_string(::getpid()) + ".json";
  const auto result = run_command(kGradsync + " local --workers " + std::to_string(workers) +
                                  " -- " + kGradsync + " bench " + flags + " --json " + json_path);
  std::ifstream file(json_path);
  rows = nlohmann::json::parse(file, nullptr, false);
  std::remove(json_path.c_str());
  return result;
}

TEST(BenchCommand, RowsUpTo64KiBTakeTheSmallIterationCount) {
  nlohmann::json rows;
  // 64 KiB and 1% more (66188 bytes): a row that is small and one that is not.
  const auto result =
      run_bench(2,
                "--min-bytes 64KiB --max-bytes 66200 --step-factor 1.01 --iters 2 --small-iters 5 "
                "--warmup 1",
                rows);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  EXPECT_NE(result.out.find("2 iterations (5 up to 64 KiB) after 1 warm-up"), std::string::npos)
      << result.out;
  ASSERT_TRUE(rows.is_array()) << result.out;
  ASSERT_EQ(rows.size(), 2u) << rows.dump(2);
  EXPECT_EQ(rows[0]["bytes"], 65536);
  EXPECT_EQ(rows[0]["iterations"], 5);
  EXPECT_EQ(rows[1]["bytes"], 66188);
  EXPECT_EQ(rows[1]["iterations"], 2);
  for (const auto& row : rows) EXPECT_EQ(row["wrong"], 0) << row.dump();
}

// With a 16-bit wire every row measures one more op's error on inexact values: above 0 (bf16
// cannot hold them) and within the documented bound, which the row states.
TEST(BenchCommand, AWireTypesRowsMeasureTheirErrorWithinTheBound) {
  nlohmann::json rows;
  const auto result = run_bench(
      3, "--wire bf16 --min-bytes 4KiB --max-bytes 1MiB --step-factor 16 --iters 2 --warmup 1",
      rows);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  EXPECT_NE(result.out.find("the largest |result - sum| / sum |x|"), std::string::npos)
      << result.out;
  ASSERT_TRUE(rows.is_array()) << result.out;
  ASSERT_EQ(rows.size(), 3u) << rows.dump(2);
  for (const auto& row : rows) {
    EXPECT_EQ(row["wrong"], 0) << row.dump();
    EXPECT_GT(row["error"].get<double>(), 0) << row.dump();
    // (1 + 2^-8)^3 (1 + 2^-24)^4 - 1
    EXPECT_NEAR(row["error_bound"].get<double>(), 0.011764, 1e-5) << row.dump();
    EXPECT_LE(row["error"].get<double>(), row["error_bound"].get<double>()) << row.dump();
  }
}

// Every collective the client has, timed and checked on every rank: its rows name it, and a
// rooted one runs from the root asked for.
TEST(BenchCommand, EveryCollectiveIsTimedAndItsResultsChecked) {
  for (const std::string collective : {"reduce_scatter", "allgather", "broadcast", "alltoall",
                                       "reduce", "gather", "scatter", "alltoallv"}) {
    nlohmann::json rows;
    const auto result = run_bench(
        3,
        "--collective " + collective +
            " --root 2 --min-bytes 4 --max-bytes 1MiB --step-factor 64 --iters 2 --warmup 1",
        rows);
    ASSERT_EQ(result.exit_code, 0) << collective << ": " << result.err << result.out;
    EXPECT_NE(result.out.find("# gradsync bench: " + collective + ", 3 ranks"), std::string::npos)
        << result.out;
    ASSERT_TRUE(rows.is_array()) << result.out;
    ASSERT_EQ(rows.size(), 4u) << rows.dump(2);
    for (const auto& row : rows) {
      EXPECT_EQ(row["collective"], collective) << row.dump();
      EXPECT_EQ(row["wrong"], 0) << row.dump();
    }
  }
}

// The ping-pong: rank 0's bytes to rank 1 and back on every size, each checked on both ranks;
// its flags that make no sense refused.
TEST(BenchCommand, ThePingPongIsTimedAndItsBytesChecked) {
  nlohmann::json rows;
  const auto result = run_bench(
      3, "--collective pingpong --min-bytes 4 --max-bytes 1MiB --step-factor 64 --iters 2", rows);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  EXPECT_NE(result.out.find("# gradsync bench: pingpong, 3 ranks"), std::string::npos)
      << result.out;
  ASSERT_TRUE(rows.is_array()) << result.out;
  ASSERT_EQ(rows.size(), 4u) << rows.dump(2);
  for (const auto& row : rows) {
    EXPECT_EQ(row["algorithm"], "direct") << row.dump();
    EXPECT_EQ(row["wrong"], 0) << row.dump();
  }
  const auto refused = run_bench(2, "--collective pingpong --root 1 --iters 1", rows);
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.err.find("the ping-pong takes no --wire, --algorithm or --root"),
            std::string::npos)
      << refused.err;
}

TEST(BenchCommand, ARootThatIsNoRankIsRefused) {
  nlohmann::json rows;
  const auto result = run_bench(2, "--collective gather --root 2 --iters 1", rows);
  EXPECT_EQ(result.exit_code, 2) << result.out;
  EXPECT_NE(result.err.find("gradsync bench: --root 2 is not a rank of a group of 2"),
            std::string::npos)
      << result.err;
}

}  // namespace
}  // namespace gradsync
