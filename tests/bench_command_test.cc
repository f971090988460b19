// `gradsync bench` under `gradsync local`, run as a process the way a user runs it: every row's
// result is checked, and rows up to 64 KiB take --small-iters timed iterations.
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

TEST(BenchCommand, RowsUpTo64KiBTakeTheSmallIterationCount) {
  const std::string json_path = "/tmp/gradsync-bench-test-" + std::to_string(::getpid()) + ".json";
  // 64 KiB and 1% more (66188 bytes): a row that is small and one that is not.
  const auto result = run_command(kGradsync + " local --workers 2 -- " + kGradsync +
                                  " bench --min-bytes 64KiB --max-bytes 66200 --step-factor "
                                  "1.01 --iters 2 --small-iters 5 --warmup 1 --json " +
                                  json_path);
  std::ifstream file(json_path);
  const nlohmann::json rows = nlohmann::json::parse(file, nullptr, false);
  std::remove(json_path.c_str());
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

}  // namespace
}  // namespace gradsync
