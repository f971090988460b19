// `gradsync submit`, run as a process the way a user runs it: bad inputs are refused before any
// daemon is contacted, and two ranks of a local cluster reduce real files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cli/npy.h"
#include "collective/partition.h"
#include "support/run_command.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using cli::NpyArray;
using testing::CommandResult;
using testing::run_command;

const std::string kGradsync = GRADSYNC_CLI;

class SubmitCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    char directory[] = "/tmp/gradsync-submit-test-XXXXXX";
    ASSERT_NE(mkdtemp(directory), nullptr);
    directory_ = directory;
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string path(const std::string& name) const { return directory_ + "/" + name; }

  void write_bytes(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }

  void write_array(const std::string& name, const NpyArray& array) const {
    const Status status = cli::write_npy_file(path(name), array);
    ASSERT_TRUE(status.ok()) << status.to_string();
  }

  // A valid 3-element f32 .npy file.
  void write_valid_input(const std::string& name) const {
    write_array(name, {DataType::f32, {3}, testing::pattern(0, 0, 12)});
  }

  // With a socket no daemon listens on: every failure must come before connecting.
  CommandResult submit(const std::string& flags) const {
    return run_command(kGradsync + " submit --socket " + path("no-daemon.sock") + " " + flags);
  }

  static void expect_rejected(const CommandResult& result, const std::string& message) {
    EXPECT_NE(result.exit_code, 0);
    EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
    EXPECT_EQ(result.out, "");
  }

  std::string directory_;
};

TEST_F(SubmitCommand, RejectsAFileWithTheWrongMagic) {
  write_bytes("in.npy", "hello, world");
  expect_rejected(submit("--in " + path("in.npy") + " --out " + path("out.npy")),
                  "--in: " + path("in.npy") +
                      ": not a .npy file: it does not start with the magic string \\x93NUMPY");
  EXPECT_FALSE(std::filesystem::exists(path("out.npy")));
}

TEST_F(SubmitCommand, RejectsATruncatedFile) {
  write_valid_input("in.npy");
  std::filesystem::resize_file(path("in.npy"), 130);
  expect_rejected(submit("--in " + path("in.npy") + " --out " + path("out.npy")),
                  "--in: " + path("in.npy") +
                      ": truncated .npy data: shape (3,) of '<f4' needs 12 bytes, but the file "
                      "has only 2 after the header");
}

TEST_F(SubmitCommand, RejectsAMissingInputFile) {
  expect_rejected(submit("--in " + path("missing.npy") + " --out " + path("out.npy")),
                  "--in: " + path("missing.npy") + ": cannot open: No such file or directory");
}

TEST_F(SubmitCommand, RequiresAnInputFile) {
  expect_rejected(submit("--out " + path("out.npy")), "--in is required");
}

TEST_F(SubmitCommand, RejectsDtypeWithoutCount) {
  write_bytes("in.raw", std::string(12, '\0'));
  expect_rejected(submit("--dtype f32 --in " + path("in.raw") + " --out " + path("out.raw")),
                  "--dtype requires --count");
  expect_rejected(submit("--count 3 --in " + path("in.raw") + " --out " + path("out.raw")),
                  "--count requires --dtype");
}

TEST_F(SubmitCommand, RejectsARawFileOfTheWrongSize) {
  write_bytes("in.raw", std::string(10, '\0'));
  expect_rejected(
      submit("--dtype bf16 --count 3 --in " + path("in.raw") + " --out " + path("out.raw")),
      "--in: " + path("in.raw") + ": the raw file has 10 bytes, but 3 bf16 elements need 6 bytes");
}

TEST_F(SubmitCommand, RejectsACountThatIsNotANumber) {
  write_bytes("in.raw", std::string(12, '\0'));
  expect_rejected(
      submit("--dtype f32 --count -1 --in " + path("in.raw") + " --out " + path("out.raw")),
      "--count: '-1' is not a number of elements");
}

TEST_F(SubmitCommand, RejectsAnUnknownCollective) {
  write_valid_input("in.npy");
  expect_rejected(
      submit("--collective frobnicate --in " + path("in.npy") + " --out " + path("out.npy")),
      "--collective: frobnicate not in {allreduce,reduce_scatter,allgather,broadcast,alltoall,"
      "reduce,gather,scatter,alltoallv}");
}

TEST_F(SubmitCommand, RequiresATotalForAllgather) {
  write_valid_input("in.npy");
  expect_rejected(
      submit("--collective allgather --in " + path("in.npy") + " --out " + path("out.npy")),
      "--total: required with --collective allgather (the element count it gathers or "
      "scatters)");
}

TEST_F(SubmitCommand, RejectsAnAllgatherInputLargerThanTheTotal) {
  write_valid_input("in.npy");
  expect_rejected(submit("--collective allgather --total 2 --in " + path("in.npy") + " --out " +
                         path("out.npy")),
                  "--in: holds 3 elements, more than --total 2");
}

TEST_F(SubmitCommand, RejectsFlagsTheCollectiveDoesNotTake) {
  write_valid_input("in.npy");
  const std::string files = " --in " + path("in.npy") + " --out " + path("out.npy");
  expect_rejected(submit("--collective broadcast --op max" + files),
                  "--op: --collective broadcast does not reduce");
  expect_rejected(submit("--root 1" + files), "--root: --collective allreduce has no root");
  expect_rejected(submit("--total 3" + files),
                  "--total: only --collective allgather, gather and scatter take a total");
  expect_rejected(submit("--collective scatter" + files),
                  "--total: required with --collective scatter");
  expect_rejected(submit("--collective gather --op max --total 6" + files),
                  "--op: --collective gather does not reduce");
  expect_rejected(submit("--collective alltoallv --send-counts 1,2" + files),
                  "--send-counts: --send-counts and --recv-counts are required with --collective "
                  "alltoallv");
  expect_rejected(submit("--send-counts 1,2 --recv-counts 2,1" + files),
                  "--send-counts: only --collective alltoallv takes send and receive counts");
  expect_rejected(submit("--algorithm bruck" + files),
                  "--algorithm: bruck cannot run allreduce (choose from auto tree hypercube ring "
                  "halving_doubling)");
}

TEST_F(SubmitCommand, RejectsAnOutputInAMissingDirectory) {
  write_valid_input("in.npy");
  expect_rejected(submit("--in " + path("in.npy") + " --out " + path("no/out.npy")),
                  "--out: " + path("no/out.npy") + ": there is no directory " + path("no"));
}

TEST_F(SubmitCommand, ReportsThatNoDaemonListens) {
  write_valid_input("in.npy");
  const CommandResult result =
      submit("--timeout-ms 2000 --in " + path("in.npy") + " --out " + path("out.npy"));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err.rfind("gradsync submit: ", 0), 0u) << result.err;
  EXPECT_EQ(result.out, "");
  EXPECT_FALSE(std::filesystem::exists(path("out.npy")));
}

// Runs `gradsync local --workers 2` with both ranks submitting in parallel; `flags(r)` gives rank
// r's flags after --socket.
CommandResult submit_on_two_ranks(const std::function<std::string(int)>& flags) {
  std::string script =
      "s0=${GRADSYNC_SOCKETS%%,*}; s1=${GRADSYNC_SOCKETS#*,}; "
      "[ \"$s0,$s1\" = \"$GRADSYNC_SOCKETS\" ] || exit 90; ";
  for (int rank = 0; rank < 2; ++rank) {
    script += kGradsync + " submit --socket \"$s" + std::to_string(rank) + "\" " + flags(rank) +
              " & p" + std::to_string(rank) + "=$!; ";
  }
  script += "wait $p0; r0=$?; wait $p1; r1=$?; [ $r0 -eq 0 ] && [ $r1 -eq 0 ]";
  return run_command("timeout 120 " + kGradsync + " local --workers 2 -- sh -c '" + script + "'");
}

TEST_F(SubmitCommand, AllReducesNpyFilesOnTwoRanks) {
  const std::vector<std::uint64_t> shape = {10, 100};
  for (int rank = 0; rank < 2; ++rank) {
    write_array(
        "in" + std::to_string(rank) + ".npy",
        {DataType::f32, shape, testing::contribution(DataType::f32, ReduceOp::sum, rank, 1000)});
  }
  const CommandResult result = submit_on_two_ranks([&](int rank) {
    const std::string r = std::to_string(rank);
    return "--verbose --in " + path("in" + r + ".npy") + " --out " + path("out" + r + ".npy");
  });
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("rank 0: allreduce ran "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("rank 1: allreduce ran "), std::string::npos) << result.out;
  const auto expected = testing::expected_reduction(DataType::f32, ReduceOp::sum, 2, 1000);
  for (int rank = 0; rank < 2; ++rank) {
    NpyArray output;
    const Status status = cli::read_npy_file(path("out" + std::to_string(rank) + ".npy"), output);
    ASSERT_TRUE(status.ok()) << status.to_string();
    EXPECT_EQ(output.type, DataType::f32);
    EXPECT_EQ(output.shape, shape);
    EXPECT_EQ(output.data, expected) << "rank " << rank;
  }
}

TEST_F(SubmitCommand, AllReducesRawBf16FilesOnTwoRanks) {
  for (int rank = 0; rank < 2; ++rank) {
    const auto data = testing::contribution(DataType::bf16, ReduceOp::max, rank, 77);
    write_bytes("in" + std::to_string(rank) + ".raw",
                std::string(reinterpret_cast<const char*>(data.data()), data.size()));
  }
  const CommandResult result = submit_on_two_ranks([&](int rank) {
    const std::string r = std::to_string(rank);
    return "--op max --dtype bf16 --count 77 --in " + path("in" + r + ".raw") + " --out " +
           path("out" + r + ".raw");
  });
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.find(" ran "), std::string::npos)
      << "printed without --verbose: " << result.out;
  const auto expected = testing::expected_reduction(DataType::bf16, ReduceOp::max, 2, 77);
  for (int rank = 0; rank < 2; ++rank) {
    NpyArray output;
    const Status status =
        cli::read_raw_file(path("out" + std::to_string(rank) + ".raw"), DataType::bf16, 77, output);
    ASSERT_TRUE(status.ok()) << status.to_string();
    EXPECT_EQ(output.data, expected) << "rank " << rank;
  }
}

TEST_F(SubmitCommand, ReduceScattersIntoEachRanksChunk) {
  constexpr std::uint64_t kCount = 101;
  for (int rank = 0; rank < 2; ++rank) {
    write_array("in" + std::to_string(rank) + ".npy",
                {DataType::i64,
                 {kCount},
                 testing::contribution(DataType::i64, ReduceOp::sum, rank, kCount)});
  }
  const CommandResult result = submit_on_two_ranks([&](int rank) {
    const std::string r = std::to_string(rank);
    return "--collective reduce_scatter --in " + path("in" + r + ".npy") + " --out " +
           path("out" + r + ".npy");
  });
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto reduced = testing::expected_reduction(DataType::i64, ReduceOp::sum, 2, kCount);
  for (int rank = 0; rank < 2; ++rank) {
    const Chunk chunk = balanced_chunk(kCount, 2, static_cast<std::uint64_t>(rank));
    NpyArray output;
    const Status status = cli::read_npy_file(path("out" + std::to_string(rank) + ".npy"), output);
    ASSERT_TRUE(status.ok()) << status.to_string();
    EXPECT_EQ(output.shape, std::vector<std::uint64_t>{chunk.count});
    EXPECT_EQ(output.data,
              testing::Bytes(reduced.begin() + static_cast<std::ptrdiff_t>(8 * chunk.offset),
                             reduced.begin() + static_cast<std::ptrdiff_t>(8 * chunk.end())))
        << "rank " << rank;
  }
}

// Rank 0 sends 1 element to itself and 3 to rank 1; rank 1 sends 2 to rank 0 and none to itself.
TEST_F(SubmitCommand, AlltoallvSendsEachRankItsCount) {
  const std::vector<std::vector<std::int32_t>> inputs = {{10, 11, 12, 13}, {20, 21}};
  const std::vector<std::string> send_counts = {"1,3", "2,0"};
  const std::vector<std::string> recv_counts = {"1,2", "3,0"};
  for (int rank = 0; rank < 2; ++rank) {
    testing::Bytes bytes(inputs[rank].size() * 4);
    std::memcpy(bytes.data(), inputs[rank].data(), bytes.size());
    write_array("in" + std::to_string(rank) + ".npy",
                {DataType::i32, {inputs[rank].size()}, bytes});
  }
  const CommandResult result = submit_on_two_ranks([&](int rank) {
    const std::string r = std::to_string(rank);
    return "--collective alltoallv --send-counts " + send_counts[rank] + " --recv-counts " +
           recv_counts[rank] + " --in " + path("in" + r + ".npy") + " --out " +
           path("out" + r + ".npy");
  });
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::vector<std::vector<std::int32_t>> expected = {{10, 20, 21}, {11, 12, 13}};
  for (int rank = 0; rank < 2; ++rank) {
    NpyArray output;
    const Status status = cli::read_npy_file(path("out" + std::to_string(rank) + ".npy"), output);
    ASSERT_TRUE(status.ok()) << status.to_string();
    std::vector<std::int32_t> values(output.data.size() / 4);
    std::memcpy(values.data(), output.data.data(), output.data.size());
    EXPECT_EQ(values, expected[rank]) << "rank " << rank;
  }
}

// Reduce, gather and scatter to and from rank 1: the root writes what it gets, the other rank
// writes no --out for a reduce or gather.
TEST_F(SubmitCommand, ReducesGathersAndScattersWithARoot) {
  constexpr std::uint64_t kCount = 11;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    write_array("in" + r + ".npy",
                {DataType::i16,
                 {kCount},
                 testing::contribution(DataType::i16, ReduceOp::max, rank, kCount)});
    const Chunk mine = balanced_chunk(kCount, 2, static_cast<std::uint64_t>(rank));
    write_array("chunk" + r + ".npy",
                {DataType::u8, {mine.count}, testing::pattern(rank, 3, mine.count)});
  }
  const CommandResult result = submit_on_two_ranks([&](int rank) {
    const std::string r = std::to_string(rank);
    const std::string scattered = rank == 1 ? "whole.npy" : "chunk0.npy";
    return "--verbose --collective reduce --op max --root 1 --in " + path("in" + r + ".npy") +
           " --out " + path("reduced" + r + ".npy") + " && " + kGradsync + " submit --socket \"$s" +
           r + "\" --collective gather --root 1 --total 11 --in " + path("chunk" + r + ".npy") +
           " --out " + path("gathered" + r + ".npy") + " && " + kGradsync +
           " submit --socket \"$s" + r + "\" --collective scatter --root 1 --total 11 --in " +
           path(rank == 1 ? "gathered1.npy" : "chunk0.npy") + " --out " +
           path("scattered" + r + ".npy");
  });
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("the result is rank 1's, no --out written"), std::string::npos)
      << result.out;
  EXPECT_FALSE(std::filesystem::exists(path("reduced0.npy")));
  EXPECT_FALSE(std::filesystem::exists(path("gathered0.npy")));
  NpyArray reduced;
  ASSERT_TRUE(cli::read_npy_file(path("reduced1.npy"), reduced).ok());
  EXPECT_EQ(reduced.data, testing::expected_reduction(DataType::i16, ReduceOp::max, 2, kCount));
  NpyArray gathered;
  ASSERT_TRUE(cli::read_npy_file(path("gathered1.npy"), gathered).ok());
  testing::Bytes both = testing::pattern(0, 3, balanced_chunk(kCount, 2, 0).count);
  const testing::Bytes second = testing::pattern(1, 3, balanced_chunk(kCount, 2, 1).count);
  both.insert(both.end(), second.begin(), second.end());
  EXPECT_EQ(gathered.data, both);
  for (int rank = 0; rank < 2; ++rank) {
    NpyArray scattered;
    ASSERT_TRUE(
        cli::read_npy_file(path("scattered" + std::to_string(rank) + ".npy"), scattered).ok());
    EXPECT_EQ(scattered.data,
              testing::pattern(rank, 3,
                               balanced_chunk(kCount, 2, static_cast<std::uint64_t>(rank)).count))
        << "rank " << rank;
  }
}

}  // namespace
}  // namespace gradsync
