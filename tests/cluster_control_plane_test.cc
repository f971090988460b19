// The control plane of a real cluster: one submitting client per rank (a second is refused with a
// message naming the first, so two clients' ops can never be paired with each other), clients of
// other users refused unless named by user or group (--client-uid, --client-gid), SIGTERM
// ending a worker cleanly, a member that stops reading delaying nobody else, and a thousand idle
// connections to the coordinator and to a worker's data port while the group forms costing
// neither its formation nor CPU.
#include <arpa/inet.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <regex>
#include <thread>

#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "net/socket.h"
#include "support/cluster.h"
#include "support/daemon_processes.h"
#include "support/process_usage.h"
#include "support/run_command.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;
using testing::cpu_ticks;
using testing::open_descriptors;
using testing::read_file;
using testing::start_coordinator;
using testing::wait_for_log;

void expect_allreduce_works(testing::TestCluster& cluster, std::uint64_t count = 777) {
  const int p = static_cast<int>(cluster.clients.size());
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, count);
    client.allreduce(data.data(), count, DataType::f32);
    EXPECT_EQ(data, testing::expected_reduction(DataType::f32, ReduceOp::sum, p, count));
  });
}

std::vector<net::UniqueFd> idle_connections(const std::string& address, int count) {
  net::HostPort target;
  EXPECT_TRUE(net::parse_host_port(address, target).ok()) << address;
  std::vector<net::UniqueFd> connections(count);
  for (auto& connection : connections) {
    const Status status =
        net::connect_tcp(target, net::Deadline::after(std::chrono::seconds(5)), connection);
    EXPECT_TRUE(status.ok()) << status.to_string();
  }
  return connections;
}

// The same from another loopback address than the daemons', as a stranger's host would.
std::vector<net::UniqueFd> idle_connections_from(const std::string& source,
                                                 const std::string& address, int count) {
  net::HostPort target;
  EXPECT_TRUE(net::parse_host_port(address, target).ok()) << address;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(target.port);
  EXPECT_EQ(::inet_pton(AF_INET, target.host.c_str(), &to.sin_addr), 1) << target.host;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  EXPECT_EQ(::inet_pton(AF_INET, source.c_str(), &from.sin_addr), 1) << source;
  std::vector<net::UniqueFd> connections(count);
  for (auto& connection : connections) {
    connection.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::bind(connection.get(), reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
    EXPECT_EQ(::connect(connection.get(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0)
        << std::strerror(errno);
  }
  return connections;
}

// Whether `pattern` shows in the log at `path` within `limit`.
bool log_shows_within(const std::string& path, const std::regex& pattern,
                      std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!std::regex_search(read_file(path), pattern)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

// A member that stops reading holds its socket full and its messages queued at the coordinator;
// the abort that another member's leaving causes still reaches everyone else before the
// coordinator gives up on the silent one, a heartbeat timeout after it last took bytes. That
// timeout is long enough for the test to read every member's messages on a slow machine and
// under ThreadSanitizer: the honest members, read one after another, are never taken for silent.
TEST(ClusterControlPlane, AMemberThatStopsReadingDelaysNoOneElsesAbort) {
  // Fake members, each announcing a long data address, so that every member's assignment (the
  // whole peer table) is far larger than what a socket that nobody reads can take.
  constexpr int kMembers = 64;
  std::string address;
  cli::ChildProcess coordinator = start_coordinator(
      {"--world-size", std::to_string(kMembers), "--alpha-us", "50", "--beta-us-per-byte", "0.001",
       "--calibration-ms", "0", "--heartbeat-timeout-ms", "10000"},
      "slow-member", address);
  net::HostPort target;
  ASSERT_TRUE(net::parse_host_port(address, target).ok()) << address;
  const auto deadline = [] { return net::Deadline::after(std::chrono::seconds(10)); };
  std::vector<net::UniqueFd> members(kMembers);
  std::deque<net::MessageReader> readers;  // a reader owns its buffer: never moved
  for (int rank = 0; rank < kMembers; ++rank) {
    if (rank == 0) {
      // Rank 0, first in every broadcast, takes almost nothing into its socket and reads nothing.
      members[rank].reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const int tiny = 1024;
      ::setsockopt(members[rank].get(), SOL_SOCKET, SO_RCVBUF, &tiny, sizeof tiny);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(target.port);
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(::connect(members[rank].get(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    } else {
      ASSERT_TRUE(net::connect_tcp(target, deadline(), members[rank]).ok());
    }
    readers.emplace_back(members[rank].get());
    if (rank > 0) {  // rank 0 reads nothing, its challenge included
      proto::CoordinatorToWorker challenge;
      ASSERT_TRUE(readers[rank].receive(challenge, deadline()).ok());
      ASSERT_TRUE(challenge.has_challenge());
    }
    proto::WorkerToCoordinator join;
    join.mutable_join()->set_data_address(std::string(4000, 'h') + ":" + std::to_string(rank + 1));
    join.mutable_join()->set_requested_rank(rank);
    ASSERT_TRUE(net::send_message(members[rank].get(), join, deadline()).ok());
  }
  // Every reading member gets its assignment and the plan.
  for (int rank = 1; rank < kMembers; ++rank) {
    proto::CoordinatorToWorker message;
    ASSERT_TRUE(readers[rank].receive(message, deadline()).ok());
    ASSERT_TRUE(message.has_assignment()) << message.DebugString().substr(0, 200);
    ASSERT_TRUE(readers[rank].receive(message, deadline()).ok());
    ASSERT_TRUE(message.has_plan()) << message.DebugString().substr(0, 200);
  }
  // Rank 1 leaves: the abort reaches every other reader while rank 0's socket stays full.
  members[1].reset();
  for (int rank = 2; rank < kMembers; ++rank) {
    proto::CoordinatorToWorker message;
    ASSERT_TRUE(readers[rank].receive(message, deadline()).ok()) << "rank " << rank;
    ASSERT_TRUE(message.has_abort()) << message.DebugString().substr(0, 200);
    ASSERT_EQ(message.abort().lost_ranks(0), 1) << message.DebugString();
  }
  // Not held up until the coordinator gave up on rank 0...
  const std::string log = testing::log_path("slow-member");
  const std::regex gave_up("gave up on the last messages to connection .*no bytes taken for");
  EXPECT_FALSE(std::regex_search(read_file(log), gave_up))
      << "the others' abort waited for the silent member's deadline";
  // ...which comes: rank 0 really was stuck.
  EXPECT_TRUE(log_shows_within(log, gave_up, std::chrono::seconds(30))) << read_file(log);
  EXPECT_EQ(coordinator.stop(), 0);
}

TEST(ClusterControlPlane, ASecondSubmittingClientOfARankIsRefusedNamingTheFirst) {
  testing::TestCluster cluster = testing::start_cluster(2);
  expect_allreduce_works(cluster);  // rank 0's ops now come from clients[0]

  // Of the same stream of the same job: each client of a job submits a stream of its own.
  Client second = Client::connect(cluster.cluster->sockets()[0],
                                  ConnectOptions{std::chrono::seconds(30), {}, {}, "0", {}});
  std::vector<float> ones(777, 100.0f);
  try {
    second.allreduce(ones.data(), ones.size(), DataType::f32);
    ADD_FAILURE() << "a second submitting client was served";
  } catch (const ClientError& error) {
    const std::string expected = "rank 0 already has a submitting client of stream '0' of job '" +
                                 second.job() + "' (pid " + std::to_string(::getpid()) +
                                 ", since ";
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
  EXPECT_EQ(ones, std::vector<float>(777, 100.0f));  // nothing was summed into it
  // A read-only connection is always served, and the first client goes on unharmed.
  EXPECT_EQ(second.rank(), 0);
  expect_allreduce_works(cluster);

  // Once the first client has gone, the rank takes ops from the next one (the stream starts
  // again, so rank 1 starts it again too).
  cluster.clients[0] = std::move(second);
  cluster.clients[1].close();
  cluster.clients[1] = Client::connect(cluster.cluster->sockets()[1],
                                       ConnectOptions{std::chrono::seconds(30), {}, {}, "0", {}});
  expect_allreduce_works(cluster);
}

TEST(ClusterControlPlane, ARestartedClientIsNotPairedWithAnotherStepOfTheOtherRanks) {
  testing::TestCluster cluster = testing::start_cluster(2);
  expect_allreduce_works(cluster);
  expect_allreduce_works(cluster);
  // Rank 0's process opens a client of a stream of its own (at op 1) while rank 1's goes on with
  // the first (at op 3).
  cluster.clients[0] = Client::connect(cluster.cluster->sockets()[0]);
  std::vector<std::string> errors(2);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    std::vector<float> data(777, 1.0f);
    try {
      client.allreduce(data.data(), data.size(), DataType::f32);
    } catch (const ClientError& error) {
      errors[rank] = error.what();
    }
  });
  // Rank 0 sees rank 1 at op 3 of the first stream; rank 1 sees that stream's client on rank 0
  // gone (or rank 0's op of the second stream): neither pairs the two.
  EXPECT_NE(errors[0].find("mismatch: rank 1 has gone on to op 3 of stream"), std::string::npos)
      << errors[0];
  EXPECT_TRUE(errors[1].find("rank 0's client") != std::string::npos ||
              errors[1].find("mismatch") != std::string::npos)
      << errors[1];
}

TEST(ClusterControlPlane, StatusNamesEveryMemberItsClientsOpsAndHeartbeat) {
  testing::TestCluster cluster = testing::start_cluster(3);
  expect_allreduce_works(cluster);
  expect_allreduce_works(cluster);
  for (int rank = 0; rank < 3; ++rank) {
    const DaemonStatus status = cluster.clients[rank].status();
    EXPECT_EQ(status.rank, rank);
    EXPECT_EQ(status.world_size, 3);
    EXPECT_EQ(status.generation, 1u);
    ASSERT_EQ(status.data_addresses.size(), 3u);
    for (const std::string& address : status.data_addresses) {
      EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
    }
    EXPECT_EQ(status.clients, 1);
    EXPECT_EQ(status.submitter_pid, ::getpid());
    EXPECT_EQ(status.ops_served, 2u);
    EXPECT_EQ(status.ops_failed, 0u);
    EXPECT_TRUE(status.coordinator.ok()) << status.coordinator.to_string();
    EXPECT_LT(status.heartbeat_age_ms, 2000.0);
  }
  // The command prints a row per daemon, each with its own data address.
  std::string sockets;
  for (const std::string& socket : cluster.cluster->sockets()) {
    sockets += (sockets.empty() ? "" : ",") + socket;
  }
  const std::string table =
      testing::run_command(std::string(GRADSYNC_CLI) + " status --sockets " + sockets).out;
  const DaemonStatus status = cluster.clients[0].status();
  for (const std::string& address : status.data_addresses) {
    EXPECT_NE(table.find(address), std::string::npos) << table;
  }
  EXPECT_NE(table.find("pid " + std::to_string(::getpid())), std::string::npos) << table;
}

// A copy of the CLI where other users can run it, wherever the build is, in a folder of its own.
std::filesystem::path cli_for_other_users(const std::string& test) {
  const std::filesystem::path shared = std::filesystem::temp_directory_path() /
                                       ("gradsync-" + test + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(shared);
  std::filesystem::permissions(shared, std::filesystem::perms(0755));
  const std::filesystem::path cli = shared / "gradsync";
  std::filesystem::copy_file(GRADSYNC_CLI, cli, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(cli, std::filesystem::perms(0755));
  return cli;
}

// A client of another user, let in by hand (the socket made world-writable), is refused with the
// reason, and the daemon's own client carries on; named by --client-uid (here through its
// variable), that user is served. Runs only as root, which can act as another user.
TEST(ClusterControlPlane, AClientOfAnotherUserIsRefusedUnlessNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another user";
  const std::filesystem::path cli = cli_for_other_users("uid-test");
  for (const bool named : {false, true}) {
    SCOPED_TRACE(named ? "named by --client-uid" : "not named");
    if (named) ::setenv("GRADSYNC_CLIENT_UID", "65534", 1);
    testing::TestCluster cluster = testing::start_cluster(1);
    ::unsetenv("GRADSYNC_CLIENT_UID");
    const std::filesystem::path socket = cluster.cluster->sockets()[0];
    std::filesystem::permissions(socket.parent_path(), std::filesystem::perms(0755));
    std::filesystem::permissions(socket, std::filesystem::perms(0666));
    const auto start = std::chrono::steady_clock::now();
    const testing::CommandResult as_nobody =
        testing::run_command("setpriv --reuid=65534 --regid=65534 --clear-groups " + cli.string() +
                             " status --sockets " + socket.string());
    // Refused at once, not after the CLI's minute of waiting for a daemon to start.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    if (named) {
      EXPECT_EQ(as_nobody.exit_code, 0) << as_nobody.err;
    } else {
      EXPECT_NE(as_nobody.exit_code, 0);
      EXPECT_NE(as_nobody.err.find("host 0's daemon runs as uid 0 and serves no client of uid "
                                   "65534"),
                std::string::npos)
          << as_nobody.out << as_nobody.err;
    }
    std::vector<float> values = {1.0f, 2.0f};
    EXPECT_NO_THROW(cluster.clients[0].allreduce(values.data(), values.size(), DataType::f32));
  }
  std::filesystem::remove_all(cli.parent_path());
}

// Named by --client-gid (here through its variable), a group gets the socket file, mode 0660, so
// that its members connect with nothing done by hand, and they are served, by their group or by
// one of their supplementary groups, however many they have. A user outside it cannot connect, and,
// let in by hand, is refused with the reason.
TEST(ClusterControlPlane, TheNamedGroupsMembersAreServedAndNoOtherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run clients as other users";
  const std::filesystem::path cli = cli_for_other_users("gid-test");
  ::setenv("GRADSYNC_CLIENT_GID", "65533", 1);
  testing::TestCluster cluster = testing::start_cluster(1);
  ::unsetenv("GRADSYNC_CLIENT_GID");
  const std::filesystem::path socket = cluster.cluster->sockets()[0];
  std::filesystem::permissions(socket.parent_path(), std::filesystem::perms(0755));
  struct stat file {};
  ASSERT_EQ(::stat(socket.c_str(), &file), 0);
  EXPECT_EQ(file.st_gid, 65533u);
  EXPECT_EQ(file.st_mode & 07777, 0660u);
  const auto status_as = [&](const std::string& identity) {
    return testing::run_command("setpriv " + identity + " " + cli.string() + " status --sockets " +
                                socket.string());
  };
  // Its group; one supplementary group; the last of a hundred (more than the daemon first asks
  // the kernel for).
  std::string many_groups = "--reuid=65534 --regid=65534 --groups=";
  for (int group = 1000; group < 1099; ++group) many_groups += std::to_string(group) + ",";
  many_groups += "65533";
  for (const std::string& identity :
       {std::string("--reuid=65534 --regid=65533 --clear-groups"),
        std::string("--reuid=65534 --regid=65534 --groups=65533"), many_groups}) {
    const testing::CommandResult member = status_as(identity);
    EXPECT_EQ(member.exit_code, 0) << identity << ": " << member.err;
  }
  const std::string stranger = "--reuid=65534 --regid=65534 --clear-groups";
  const auto start = std::chrono::steady_clock::now();
  const testing::CommandResult kept_out = status_as(stranger);
  // At once: the CLI waits for daemons that are not there yet, not for a door that is shut.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(kept_out.exit_code, 0);
  EXPECT_NE(kept_out.err.find("Permission denied"), std::string::npos) << kept_out.err;
  std::filesystem::permissions(socket, std::filesystem::perms(0666));
  const testing::CommandResult refused = status_as(stranger);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("serves no client of uid 65534"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--client-gid a group"), std::string::npos) << refused.err;
  std::vector<float> values = {1.0f, 2.0f};
  EXPECT_NO_THROW(cluster.clients[0].allreduce(values.data(), values.size(), DataType::f32));
  std::filesystem::remove_all(cli.parent_path());
}

// A daemon whose user may not hand the socket to the group says so and does not serve.
TEST(ClusterControlPlane, ASocketForAGroupTheDaemonsUserIsNotInIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to listen as another user";
  const std::filesystem::path folder = cli_for_other_users("gid-listen-test").parent_path();
  std::filesystem::permissions(folder, std::filesystem::perms(0777));
  const std::string path = (folder / "rank0.sock").string();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // As nobody, in no group but its own.
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    net::UniqueFd listener;
    const Status status = net::listen_unix(path, listener, 65533);
    const bool said = status.message().find("cannot hand unix socket " + path +
                                            " to group 65533 (the daemon's user must be root "
                                            "or in that group)") != std::string::npos;
    ::_exit(!status.ok() && said ? 0 : 1);
  }
  int child_status = 0;
  ASSERT_EQ(::waitpid(child, &child_status, 0), child);
  EXPECT_TRUE(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0) << child_status;
  EXPECT_FALSE(std::filesystem::exists(path)) << "the socket file it could not hand over is left";
  std::filesystem::remove_all(folder);
}

TEST(ClusterControlPlane, SigtermEndsAServingWorkerWithStatusZeroAndRemovesItsSocket) {
  testing::TestCluster cluster = testing::start_cluster(2);
  const std::string socket = cluster.cluster->sockets()[1];
  ASSERT_TRUE(std::filesystem::exists(socket));
  ASSERT_EQ(::kill(cluster.cluster->worker(1).pid(), SIGTERM), 0);
  EXPECT_EQ(cluster.cluster->worker(1).wait(), 0) << cluster.cluster->log_of_worker(1);
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_NE(cluster.cluster->log_of_worker(1).find("stopping on signal 15"), std::string::npos);
}

// SIGTERM to `process` after `settle`; expects exit status 0 within two seconds and the log line.
void expect_clean_stop(cli::ChildProcess& process, const std::string& log_path,
                       std::chrono::milliseconds settle) {
  std::this_thread::sleep_for(settle);
  ASSERT_TRUE(process.running()) << read_file(log_path);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(process.pid(), SIGTERM), 0);
  EXPECT_EQ(process.wait(), 0) << read_file(log_path);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(read_file(log_path).find("stopping on signal 15"), std::string::npos)
      << read_file(log_path);
}

TEST(ClusterControlPlane, SigtermEndsAWorkerAndACoordinatorAtEveryStepOfForming) {
  const std::string directory = ::testing::TempDir();
  // A worker whose coordinator is not there: it is retrying to connect.
  const std::string lonely_log = directory + "/sigterm-lonely.log";
  cli::ChildProcess lonely = cli::ChildProcess::start(
      {GRADSYNC_DAEMON, "worker", "--coordinator", "127.0.0.1:1", "--listen", "127.0.0.1:0",
       "--socket", directory + "/sigterm-lonely.sock"},
      lonely_log);
  expect_clean_stop(lonely, lonely_log, std::chrono::milliseconds(300));

  // A worker waiting for a group of two that never forms, and its coordinator.
  std::string address;
  cli::ChildProcess coordinator =
      start_coordinator({"--world-size", "2"}, "sigterm-coordinator", address);
  const std::string coordinator_log = directory + "/sigterm-coordinator.log";
  const std::string waiting_log = directory + "/sigterm-waiting.log";
  cli::ChildProcess waiting =
      cli::ChildProcess::start({GRADSYNC_DAEMON, "worker", "--coordinator", address, "--listen",
                                "127.0.0.1:0", "--socket", directory + "/sigterm-waiting.sock"},
                               waiting_log);
  expect_clean_stop(waiting, waiting_log, std::chrono::milliseconds(500));
  EXPECT_NE(read_file(waiting_log).find("joining"), std::string::npos);
  expect_clean_stop(coordinator, coordinator_log, std::chrono::milliseconds(0));
}

TEST(ClusterControlPlane, AThousandIdleConnectionsNeitherStopAGroupNorCostCpu) {
  constexpr int kIdle = 1000;
  std::string address;
  cli::ChildProcess coordinator = start_coordinator({"--world-size", "2"}, "idle", address);
  std::vector<cli::ChildProcess> workers;
  std::vector<std::string> sockets;
  const auto start_worker = [&](int rank) {
    const std::string name = "idle-worker-" + std::to_string(rank);
    workers.push_back(testing::start_worker(address, {"--rank", std::to_string(rank)}, name));
    sockets.push_back(::testing::TempDir() + "/" + name + ".sock");
    return testing::log_path(name);
  };
  // While the group forms: idle connections to the coordinator and to the data port of the
  // worker that has joined, before the second worker starts.
  const std::string first_log = start_worker(0);
  const std::string data_address =
      wait_for_log(first_log, std::regex("data address ([0-9.]+:[0-9]+)"));
  std::vector<net::UniqueFd> at_coordinator = idle_connections_from("127.0.0.2", address, kIdle);
  std::vector<net::UniqueFd> at_data_port = idle_connections(data_address, kIdle);
  const std::string second_log = start_worker(1);
  for (const std::string& log : {first_log, second_log}) {
    wait_for_log(log, std::regex("(serving clients)"));
  }
  testing::TestCluster cluster;
  for (const std::string& socket : sockets) cluster.clients.push_back(Client::connect(socket));
  expect_allreduce_works(cluster);
  expect_allreduce_works(cluster, 1 << 18);
  // The coordinator holds one address's share of them (MembershipConfig::strangers_per_address)
  // and closed the rest at once.
  EXPECT_LT(open_descriptors(coordinator.pid()), 128 + 32);
  // Once the group is known, a stranger's address may be opening 128 connections at once to a
  // data port (kOpeningsPerStranger), and the rest are closed at once: the worker holds a share
  // of a thousand more, once those from before the plan have met their 2 s hello deadline.
  const auto expired = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (open_descriptors(workers[0].pid()) > 64 && std::chrono::steady_clock::now() < expired) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::vector<net::UniqueFd> strangers_at_data_port =
      idle_connections_from("127.0.0.2", data_address, kIdle);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(open_descriptors(workers[0].pid()), 64 + 128);
  expect_allreduce_works(cluster);

  // Idle, with the idle connections still open at their end: the daemons sleep.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long before = cpu_ticks(coordinator.pid()) + cpu_ticks(workers[0].pid());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const long used = cpu_ticks(coordinator.pid()) + cpu_ticks(workers[0].pid()) - before;
  EXPECT_LE(used, 5) << "clock ticks of CPU in one idle second";  // 50 ms at 100 Hz
  cluster.clients.clear();
  for (cli::ChildProcess& worker : workers) EXPECT_EQ(worker.stop(), 0);
  EXPECT_EQ(coordinator.stop(), 0);
}

}  // namespace
}  // namespace gradsync
