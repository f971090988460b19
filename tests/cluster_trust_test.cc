// Only the group's members get in: a worker without the group secret, or with another one, is
// refused by the coordinator with UNAUTHENTICATED and a log line naming its address; a worker with
// a secret refuses a coordinator that cannot prove it; two groups on one machine with different
// secrets cannot mix; and without a secret no daemon listens beyond loopback unless told
// --insecure.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>

#include "net/group_secret.h"
#include "support/daemon_processes.h"
#include "support/run_command.h"

namespace gradsync {
namespace {

using testing::log_path;
using testing::read_file;
using testing::start_coordinator;
using testing::start_worker;
using testing::wait_for_log;

std::string new_secret(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name + ".secret";
  std::filesystem::remove(path);
  EXPECT_TRUE(net::GroupSecret::create_file(path).ok());
  return path;
}

// Expects `worker` to give up at once with exit status 2 and `reason` in its log.
void expect_refused(cli::ChildProcess& worker, const std::string& name, const std::string& reason) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(worker.wait(), 2) << read_file(log_path(name));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(read_file(log_path(name)).find(reason), std::string::npos) << read_file(log_path(name));
}

TEST(ClusterTrust, AWorkerWithoutTheSecretOrWithAnotherIsRefused) {
  const std::string secret = new_secret("group");
  std::string address;
  cli::ChildProcess coordinator = start_coordinator(
      {"--world-size", "1", "--secret-file", secret, "--calibration-ms", "0"}, "trust", address);
  const std::string refusal = "the join request does not prove the group secret";
  cli::ChildProcess without = start_worker(address, {}, "trust-without");
  expect_refused(without, "trust-without", refusal);
  cli::ChildProcess other =
      start_worker(address, {"--secret-file", new_secret("other")}, "trust-other");
  expect_refused(other, "trust-other", refusal);
  // The coordinator names who tried, and its group still forms with the right secret.
  EXPECT_NE(read_file(log_path("trust")).find("rejected a connection from 127.0.0.1:"),
            std::string::npos)
      << read_file(log_path("trust"));
  cli::ChildProcess member = start_worker(address, {"--secret-file", secret}, "trust-member");
  wait_for_log(log_path("trust-member"), std::regex("(serving clients)"));
  EXPECT_EQ(member.stop(), 0);
  EXPECT_EQ(coordinator.stop(), 0);
}

TEST(ClusterTrust, AWorkerWithASecretRefusesACoordinatorThatCannotProveIt) {
  std::string address;
  cli::ChildProcess coordinator = start_coordinator({"--world-size", "1"}, "trust-open", address);
  cli::ChildProcess worker =
      start_worker(address, {"--secret-file", new_secret("lonely")}, "trust-lonely");
  expect_refused(worker, "trust-lonely", "does not prove the group secret");
  EXPECT_EQ(coordinator.stop(), 0);
}

TEST(ClusterTrust, TwoGroupsWithDifferentSecretsCannotMix) {
  // Group A waits for two workers; group B's worker, pointed at A's coordinator by mistake or on
  // purpose, is refused, and A forms with its own.
  const std::string secret_a = new_secret("group-a");
  const std::string secret_b = new_secret("group-b");
  std::string address_a;
  cli::ChildProcess coordinator_a =
      start_coordinator({"--world-size", "2", "--secret-file", secret_a, "--calibration-ms", "0"},
                        "mix-a", address_a);
  cli::ChildProcess first = start_worker(address_a, {"--secret-file", secret_a}, "mix-a0");
  cli::ChildProcess stray = start_worker(address_a, {"--secret-file", secret_b}, "mix-b0");
  expect_refused(stray, "mix-b0", "does not prove the group secret");
  cli::ChildProcess second = start_worker(address_a, {"--secret-file", secret_a}, "mix-a1");
  wait_for_log(log_path("mix-a0"), std::regex("(serving clients)"));
  wait_for_log(log_path("mix-a1"), std::regex("(serving clients)"));
  EXPECT_EQ(first.stop(), 0);
  EXPECT_EQ(second.stop(), 0);
  EXPECT_EQ(coordinator_a.stop(), 0);
}

TEST(ClusterTrust, WithoutASecretNoDaemonListensBeyondLoopbackUnlessInsecure) {
  const std::string daemon = GRADSYNC_DAEMON;
  testing::CommandResult refused =
      testing::run_command(daemon + " --dry-run coordinator --listen 0.0.0.0:0 --world-size 2");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("is not a loopback address and there is no group secret"),
            std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--secret-file"), std::string::npos) << refused.err;
  refused = testing::run_command(daemon +
                                 " --dry-run worker --coordinator 10.0.0.1:1 --listen 0.0.0.0:0 "
                                 "--socket /tmp/never.sock");
  EXPECT_NE(refused.exit_code, 0) << refused.err;
  const testing::CommandResult insecure = testing::run_command(
      daemon + " --dry-run coordinator --listen 0.0.0.0:0 --world-size 2 --insecure");
  EXPECT_EQ(insecure.exit_code, 0) << insecure.out;
  EXPECT_NE(insecure.out.find("--insecure: listening on 0.0.0.0 without a group secret"),
            std::string::npos)
      << insecure.out;
  const testing::CommandResult with_secret = testing::run_command(
      daemon + " --dry-run coordinator --listen 0.0.0.0:0 --world-size 2 --secret-file " +
      new_secret("dry-run") + "");
  EXPECT_EQ(with_secret.exit_code, 0) << with_secret.out;
  // A secret too short to be one is refused, with how to make a good one.
  const std::string short_secret = ::testing::TempDir() + "/short.secret";
  std::ofstream(short_secret) << "password\n";
  ::chmod(short_secret.c_str(), 0600);
  const testing::CommandResult too_short = testing::run_command(
      daemon + " --dry-run coordinator --listen 127.0.0.1:0 --world-size 2 --secret-file " +
      short_secret + "");
  EXPECT_NE(too_short.exit_code, 0);
  EXPECT_NE(too_short.err.find("holds 8 bytes; a secret needs at least 16"), std::string::npos)
      << too_short.err;
}

}  // namespace
}  // namespace gradsync
