// The knob table (config/knobs.h) is where the daemons' defaults come from: gradsyncd --dry-run
// logs every knob with the table's default, a GRADSYNC_* variable overrides it, and a value out of
// the table's range is refused naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "config/knobs.h"
#include "support/run_command.h"

namespace gradsync {
namespace {

const std::string kWorker = std::string(GRADSYNC_DAEMON) +
                            " --dry-run worker --coordinator 127.0.0.1:1 --listen 127.0.0.1:0 "
                            "--socket /tmp/knob-table-test.sock";
const std::string kCoordinator =
    std::string(GRADSYNC_DAEMON) + " --dry-run coordinator --listen 127.0.0.1:0 --world-size 2";

std::string logged(const knobs::Knob<int>& knob, int value) {
  std::string name(knob.flag.substr(2));
  std::replace(name.begin(), name.end(), '-', '_');
  return name + "=" + std::to_string(value);
}

TEST(KnobTable, TheDaemonsStartWithTheTablesDefaults) {
  const auto worker = testing::run_command("env -u GRADSYNC_SPIN_US " + kWorker);
  ASSERT_EQ(worker.exit_code, 0) << worker.out;
  EXPECT_NE(worker.out.find("segment_bytes=" + std::to_string(knobs::kSegmentBytes.default_value)),
            std::string::npos)
      << worker.out;
  EXPECT_NE(worker.out.find(logged(knobs::kSpinUs, knobs::kSpinUs.default_value)),
            std::string::npos)
      << worker.out;
  EXPECT_NE(worker.out.find(logged(knobs::kJoinTimeoutMs, knobs::kJoinTimeoutMs.default_value)),
            std::string::npos)
      << worker.out;
  const auto coordinator = testing::run_command(kCoordinator);
  ASSERT_EQ(coordinator.exit_code, 0) << coordinator.out;
  for (const auto* knob : {&knobs::kHeartbeatTimeoutMs, &knobs::kCalibrationMs}) {
    EXPECT_NE(coordinator.out.find(logged(*knob, knob->default_value)), std::string::npos)
        << coordinator.out;
  }
}

TEST(KnobTable, AnEnvironmentVariableOverridesTheDefault) {
  const auto worker =
      testing::run_command("env " + std::string(knobs::kSpinUs.env) + "=7 " + kWorker);
  ASSERT_EQ(worker.exit_code, 0) << worker.out;
  EXPECT_NE(worker.out.find(logged(knobs::kSpinUs, 7)), std::string::npos) << worker.out;
}

TEST(KnobTable, AValueOutOfTheTablesRangeIsRefusedNamingTheFlag) {
  const auto worker = testing::run_command(kWorker + " " + std::string(knobs::kSpinUs.flag) + " " +
                                           std::to_string(knobs::kSpinUs.max + 1));
  EXPECT_NE(worker.exit_code, 0);
  EXPECT_NE(worker.err.find(std::string(knobs::kSpinUs.flag) + ": Value " +
                            std::to_string(knobs::kSpinUs.max + 1) + " not in range"),
            std::string::npos)
      << worker.err;
}

// Every flag a knob makes carries the table's help: `gradsyncd worker --help` and `coordinator
// --help` explain each of them.
TEST(KnobTable, EveryKnobOfADaemonIsExplainedInItsHelp) {
  const auto worker = testing::run_command(std::string(GRADSYNC_DAEMON) + " worker --help");
  const auto coordinator =
      testing::run_command(std::string(GRADSYNC_DAEMON) + " coordinator --help");
  ASSERT_EQ(worker.exit_code, 0) << worker.err;
  ASSERT_EQ(coordinator.exit_code, 0) << coordinator.err;
  const auto explains = [](const std::string& help, std::string_view flag, std::string_view text) {
    const auto at = help.find(std::string(flag) + " ");
    return at != std::string::npos && help.find(std::string(text), at) != std::string::npos;
  };
  // Flag and help of each knob a daemon reads, whatever its value's type.
  const std::vector<std::pair<std::string_view, std::string_view>> worker_knobs = {
      {knobs::kSegmentBytes.flag, knobs::kSegmentBytes.help},
      {knobs::kSpinUs.flag, knobs::kSpinUs.help},
      {knobs::kStallTimeoutMs.flag, knobs::kStallTimeoutMs.help},
      {knobs::kClientUid.flag, knobs::kClientUid.help},
      {knobs::kClientGid.flag, knobs::kClientGid.help},
      {knobs::kLocalRanks.flag, knobs::kLocalRanks.help},
      {knobs::kJoinTimeoutMs.flag, knobs::kJoinTimeoutMs.help},
      {knobs::kCoordinatorTimeoutMs.flag, knobs::kCoordinatorTimeoutMs.help},
      {knobs::kSecretFile.flag, knobs::kSecretFile.help}};
  const std::vector<std::pair<std::string_view, std::string_view>> coordinator_knobs = {
      {knobs::kHeartbeatTimeoutMs.flag, knobs::kHeartbeatTimeoutMs.help},
      {knobs::kCalibrationMs.flag, knobs::kCalibrationMs.help},
      {knobs::kExploreEvery.flag, knobs::kExploreEvery.help},
      {knobs::kAlphaUs.flag, knobs::kAlphaUs.help},
      {knobs::kBetaUsPerByte.flag, knobs::kBetaUsPerByte.help},
      {knobs::kSecretFile.flag, knobs::kSecretFile.help}};
  for (const auto& [flag, help] : worker_knobs) {
    EXPECT_TRUE(explains(worker.out, flag, help)) << flag << "\n" << worker.out;
  }
  for (const auto& [flag, help] : coordinator_knobs) {
    EXPECT_TRUE(explains(coordinator.out, flag, help)) << flag << "\n" << coordinator.out;
  }
}

}  // namespace
}  // namespace gradsync
