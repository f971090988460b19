// `gradsync model`, run as a process the way a user runs it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/test_names.h"

namespace gradsync {
namespace {

using testing::run_command;

const std::string kModel = std::string(GRADSYNC_CLI) + " model ";
const std::string kSeedFlags = "--ranks 64 --alpha-us 20 --beta-us-per-byte 0.0001 ";

TEST(ModelCommand, PrintsTheSeedTableWithTheChoiceMarked) {
  const auto result = run_command(kModel + kSeedFlags + "--sizes 1000,1000000,100000000");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(
      result.out.find("tree          hypercube               ring   halving_doubling  chosen"),
      std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("          1000             241.2              120.6*            "
                            "2520.2              240.2   hypercube\n"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("     100000000          120240.0            60120.0            "
                            "22207.5            19927.5*  halving_doubling\n"),
            std::string::npos)
      << result.out;
}

TEST(ModelCommand, PrintsOneJsonObjectPerSizeAndAlgorithm) {
  const auto result = run_command(kModel + kSeedFlags + "--sizes 1000,1MiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto entries = nlohmann::json::parse(result.out);
  ASSERT_EQ(entries.size(), 8u);
  EXPECT_EQ(entries[2], nlohmann::json::parse(R"({"bytes": 1000, "algorithm": "ring",
                                                  "predicted_us": 2520.2, "chosen": false})"));
  EXPECT_EQ(entries[1]["algorithm"], "hypercube");
  EXPECT_EQ(entries[1]["chosen"], true);
  int chosen_per_size[2] = {0, 0};
  for (std::size_t i = 0; i < entries.size(); ++i)
    chosen_per_size[i / 4] += entries[i]["chosen"] ? 1 : 0;
  EXPECT_EQ(chosen_per_size[0], 1);
  EXPECT_EQ(chosen_per_size[1], 1);
  EXPECT_EQ(entries[4]["bytes"], 1048576);
}

struct BadInvocation {
  std::string flags;
  std::string message;
};

class ModelCommandRejects : public ::testing::TestWithParam<BadInvocation> {};

TEST_P(ModelCommandRejects, WithAClearMessageAndANonZeroExit) {
  const auto result = run_command(kModel + GetParam().flags);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find(GetParam().message), std::string::npos) << result.err;
  EXPECT_EQ(result.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    BadFlags, ModelCommandRejects,
    ::testing::Values(
        BadInvocation{"--ranks 0 --alpha-us 1 --beta-us-per-byte 1 --sizes 4",
                      "--ranks: Value 0 not in range 1 to 4096"},
        BadInvocation{"--ranks x --alpha-us 1 --beta-us-per-byte 1 --sizes 4", "--ranks"},
        BadInvocation{"--ranks 4 --alpha-us -1 --beta-us-per-byte 1 --sizes 4",
                      "--alpha-us: '-1' is not a number >= 0"},
        BadInvocation{"--ranks 4 --alpha-us 1 --beta-us-per-byte 1e999 --sizes 4",
                      "--beta-us-per-byte: '1e999' is not a number >= 0"},
        BadInvocation{"--ranks 4 --alpha-us 1 --beta-us-per-byte 1 --sizes 4,,8",
                      "--sizes: '' is not a size in bytes"},
        BadInvocation{"--ranks 4 --alpha-us 1 --beta-us-per-byte 1 --sizes 4MB",
                      "--sizes: '4MB' is not a size in bytes"},
        BadInvocation{"--ranks 4 --alpha-us 1 --beta-us-per-byte 1 --sizes 6",
                      "--sizes: 6 bytes is not a whole number of f32 elements (4 bytes each)"},
        BadInvocation{"--ranks 4 --alpha-us 1 --beta-us-per-byte 1 --sizes 4 --dtype f128",
                      "--dtype: f128 not in"},
        BadInvocation{"--ranks 4 --alpha-us 1 --beta-us-per-byte 1", "--sizes is required"},
        BadInvocation{"--ranks 4 --alpha-us 1 --beta-us-per-byte 1 --sizes 4 --frobnicate",
                      "The following argument was not expected: --frobnicate"}),
    // The flags as typed: "ranks_4_alpha_us_1_beta_us_per_byte_1_sizes_4MB".
    [](const ::testing::TestParamInfo<BadInvocation>& param_info) {
      return testing::identifier(param_info.param.flags);
    });

TEST(GradsyncCommand, RequiresASubcommand) {
  const auto result = run_command(GRADSYNC_CLI);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("A subcommand is required"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace gradsync
