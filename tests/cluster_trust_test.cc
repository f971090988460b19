// Only the group's members get in: a worker without the group secret, or with another one, is
// refused by the coordinator with UNAUTHENTICATED and a log line naming its address; a worker with
// a secret refuses a coordinator that cannot prove it, in an assignment or in word that it waits as
// a spare; a spare waits no longer than its join timeout after its coordinator's last word; two
// groups on one machine with different secrets cannot mix; a stranger cannot pose as a peer on a
// data port; and without a secret no daemon listens beyond loopback unless told --insecure.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "engine/frame.h"
#include "gradsync.pb.h"
#include "net/group_secret.h"
#include "net/message_stream.h"
#include "net/socket.h"
#include "support/cluster.h"
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

// Waits up to `limit` for `worker` to exit and returns its exit status; one still running then is
// stopped, and -1 returned.
int exit_within(cli::ChildProcess& worker, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (worker.running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      worker.stop();
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return worker.wait();
}

// Expects `worker` to give up at once with exit status 2 and `reason` in its log.
void expect_refused(cli::ChildProcess& worker, const std::string& name, const std::string& reason) {
  EXPECT_EQ(exit_within(worker, std::chrono::seconds(5)), 2) << read_file(log_path(name));
  EXPECT_NE(read_file(log_path(name)).find(reason), std::string::npos) << read_file(log_path(name));
}

// A stranger where a worker looks for its coordinator: it listens on loopback, opens a connection
// with a challenge as a coordinator does, reads the join and answers what a test tells it to. It
// knows no group secret.
class FakeCoordinator {
 public:
  FakeCoordinator() {
    net::HostPort loopback;
    EXPECT_TRUE(net::parse_host_port("127.0.0.1:0", loopback).ok());
    EXPECT_TRUE(net::listen_tcp(loopback, listener_).ok());
  }

  std::string address() const { return net::local_address(listener_.get()).to_string(); }

  // Takes a worker's connection, challenges it, and returns its join request.
  proto::JoinRequest take_join() {
    const auto deadline = net::Deadline::after(std::chrono::seconds(5));
    EXPECT_TRUE(net::accept_connection(listener_.get(), deadline, connection_).ok());
    proto::CoordinatorToWorker challenge;
    challenge.mutable_challenge()->set_nonce(net::make_nonce());
    send(challenge);
    proto::WorkerToCoordinator join;
    EXPECT_TRUE(net::MessageReader(connection_.get()).receive(join, deadline).ok());
    EXPECT_TRUE(join.has_join());
    return join.join();
  }

  void send(const proto::CoordinatorToWorker& message) {
    EXPECT_TRUE(
        net::send_message(connection_.get(), message, net::Deadline::after(std::chrono::seconds(5)))
            .ok());
  }

 private:
  net::UniqueFd listener_;
  net::UniqueFd connection_;  // open until the test ends: the worker is not let off by a close
};

proto::CoordinatorToWorker spare(std::uint64_t renewal, const std::string& proof = "") {
  proto::CoordinatorToWorker message;
  message.mutable_spare()->set_why("the group of 2 is complete: waiting as a spare (1 waiting)");
  message.mutable_spare()->set_renewal(renewal);
  message.mutable_spare()->set_proof(proof);
  return message;
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

// Without the proof, a stranger that took the coordinator's address would keep the worker
// waiting as a spare, for a place that never comes.
TEST(ClusterTrust, AWorkerWithASecretRefusesASpareFromACoordinatorThatCannotProveIt) {
  for (const std::string& proof : {std::string(), std::string(32, 'x')}) {
    SCOPED_TRACE(proof.empty() ? "no proof" : "a guessed proof");
    const std::string name = proof.empty() ? "trust-spare-unproven" : "trust-spare-guessed";
    FakeCoordinator impostor;
    cli::ChildProcess worker =
        start_worker(impostor.address(), {"--secret-file", new_secret(name)}, name);
    EXPECT_FALSE(impostor.take_join().challenge_response().empty());
    impostor.send(spare(1, proof));
    expect_refused(worker, name,
                   "does not prove the group secret in its word that this worker is a spare");
  }
}

// A coordinator that falls silent (or a stranger, where there is no secret) cannot keep a spare
// waiting: each word starts its join timeout again, and the spare gives up when one passes without.
TEST(ClusterTrust, ASpareWaitsNoLongerThanItsJoinTimeoutAfterItsCoordinatorsLastWord) {
  FakeCoordinator silent;
  const std::string name = "silent-spare";
  cli::ChildProcess worker = start_worker(silent.address(), {"--join-timeout-ms", "2000"}, name);
  EXPECT_EQ(silent.take_join().spare_renewal_ms(), 500u);
  silent.send(spare(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto last_word = std::chrono::steady_clock::now();
  silent.send(spare(2));
  EXPECT_EQ(exit_within(worker, std::chrono::seconds(10)), 2) << read_file(log_path(name));
  EXPECT_GE(std::chrono::steady_clock::now() - last_word, std::chrono::milliseconds(2000))
      << "the last word started the join timeout again";
  EXPECT_NE(read_file(log_path(name))
                .find("waited 2000 ms for a place in the group, or the word of the coordinator "
                      "at " +
                      silent.address() +
                      " that this worker is still kept as a spare (--join-timeout-ms)"),
            std::string::npos)
      << read_file(log_path(name));
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

// A hello to rank 0's data port that claims to be rank 1, the moment rank 0 has joined: what a
// stranger on the network can send, knowing the generation and the world size. Returns the
// connection, open. `lane`: the connection's (data_mesh.h), 0 the collectives'.
net::UniqueFd pose_as_rank_one(const std::string& data_address, bool with_nonce,
                               std::uint32_t lane = 0) {
  net::HostPort target;
  EXPECT_TRUE(net::parse_host_port(data_address, target).ok());
  net::UniqueFd fd;
  const auto deadline = net::Deadline::after(std::chrono::seconds(5));
  EXPECT_TRUE(net::connect_tcp(target, deadline, fd).ok());
  engine::FrameHeader hello;
  hello.kind = engine::FrameKind::hello;
  hello.generation = 1;
  hello.op.place = 1;
  hello.round = lane;
  hello.descriptor.count = 2;
  hello.length = with_nonce ? net::kNonceBytes : 0;
  EXPECT_TRUE(net::write_all(fd.get(), engine::encode(hello), deadline).ok());
  if (with_nonce) {
    const std::string nonce = net::make_nonce();
    EXPECT_TRUE(net::write_all(fd.get(), std::as_bytes(std::span(nonce)), deadline).ok());
  }
  return fd;
}

TEST(ClusterTrust, AStrangerCannotPoseAsAPeerOnTheDataPort) {
  const std::string secret = new_secret("mesh");
  std::string address;
  cli::ChildProcess coordinator = start_coordinator(
      {"--world-size", "2", "--secret-file", secret, "--calibration-ms", "0"}, "mesh", address);
  cli::ChildProcess first =
      start_worker(address, {"--secret-file", secret, "--rank", "0"}, "mesh-0");
  const std::string data_address =
      wait_for_log(log_path("mesh-0"), std::regex("data address ([0-9.]+:[0-9]+)"));
  // Before the real rank 1: one impostor without a nonce, one that answers with a wrong proof,
  // one that opens a lane there is not.
  net::UniqueFd bare = pose_as_rank_one(data_address, false);
  net::UniqueFd guessing = pose_as_rank_one(data_address, true);
  net::UniqueFd no_lane = pose_as_rank_one(data_address, true, 2);
  cli::ChildProcess second =
      start_worker(address, {"--secret-file", secret, "--rank", "1"}, "mesh-1");
  // The guessing impostor gets rank 0's answer once rank 0 has its plan, and answers it wrongly.
  std::string answer(net::kNonceBytes + 32, '\0');
  ASSERT_TRUE(net::read_exact(guessing.get(), std::as_writable_bytes(std::span(answer)),
                              net::Deadline::after(std::chrono::seconds(10)))
                  .ok());
  const std::string wrong(32, 'x');
  ASSERT_TRUE(net::write_all(guessing.get(), std::as_bytes(std::span(wrong)),
                             net::Deadline::after(std::chrono::seconds(5)))
                  .ok());
  wait_for_log(log_path("mesh-0"), std::regex("(a hello without the group secret's nonce)"));
  wait_for_log(log_path("mesh-0"), std::regex("(it does not prove the group secret)"));
  wait_for_log(log_path("mesh-0"), std::regex("(hello for lane 2; there are 2)"));
  // The real rank 1 is rank 0's peer: their all-reduce is right.
  wait_for_log(log_path("mesh-0"), std::regex("(serving clients)"));
  wait_for_log(log_path("mesh-1"), std::regex("(serving clients)"));
  testing::TestCluster cluster;
  for (const char* name : {"mesh-0", "mesh-1"}) {
    cluster.clients.push_back(Client::connect(::testing::TempDir() + "/" + name + ".sock"));
  }
  testing::on_every_rank(cluster, [](int rank, Client& client) {
    std::vector<float> data(1000, static_cast<float>(rank + 1));
    client.allreduce(data.data(), data.size(), DataType::f32);
    EXPECT_EQ(data, std::vector<float>(1000, 3.0f));
  });
  cluster.clients.clear();
  EXPECT_EQ(first.stop(), 0);
  EXPECT_EQ(second.stop(), 0);
  EXPECT_EQ(coordinator.stop(), 0);
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
