// A worker's unix socket fed something wrong: a malformed message drops only that client, and an
// op the daemon cannot start (it names a shared-memory region it never received or refused, or a
// count too large for any region) fails with a clear error on that rank and, through the abort it
// announces, on the other ranks at once.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "net/shared_memory.h"
#include "net/socket.h"
#include "proto/convert.h"
#include "support/cluster.h"
#include "support/raw_hello.h"
#include "support/process_usage.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

net::UniqueFd raw_connection(const std::string& socket) {
  net::UniqueFd fd;
  EXPECT_TRUE(net::connect_unix(socket, net::Deadline::after(std::chrono::seconds(5)), fd).ok());
  return fd;
}

TEST(ClusterClientInput, MalformedMessagesAndUnknownRegionsAreRejectedAndLoseNothing) {
  testing::TestCluster cluster = testing::start_cluster(2);
  ASSERT_EQ(cluster.clients.size(), 2u);
  const std::string socket = cluster.cluster->sockets()[0];
  const auto deadline = [] { return net::Deadline::after(std::chrono::seconds(10)); };

  // A length prefix far over the limit.
  {
    net::UniqueFd fd = raw_connection(socket);
    const std::vector<std::byte> huge = {std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                                         std::byte{0x7f}};
    ASSERT_TRUE(net::write_all(fd.get(), huge, deadline()).ok());
    EXPECT_TRUE(net::wait_readable(fd.get(), deadline()));  // closed by the daemon
  }

  // An op naming a region the daemon never received, while rank 1 submits the matching op.
  net::UniqueFd fd = raw_connection(socket);
  net::MessageReader reader(fd.get());
  const proto::ClientToDaemon hello = testing::hello_pairing_with(cluster.clients[1]);
  ASSERT_TRUE(net::send_message(fd.get(), hello, deadline()).ok());
  proto::DaemonToClient reply;
  ASSERT_TRUE(reader.receive(reply, deadline()).ok());
  ASSERT_TRUE(reply.has_hello());
  proto::ClientToDaemon submit;
  proto::SubmitOp& op = *submit.mutable_submit();
  op.set_request_id(1);
  op.set_region_id(99);
  op.set_collective(to_proto(Collective::allreduce));
  op.set_dtype(to_proto(DataType::f32));
  op.set_op(to_proto(ReduceOp::sum));
  op.set_count(100);
  op.set_timeout_ms(30'000);
  std::string peer_error;
  const auto start = std::chrono::steady_clock::now();
  std::thread peer([&] {
    std::vector<float> data(100, 1.0f);
    try {
      cluster.clients[1].allreduce(data.data(), data.size(), DataType::f32);
    } catch (const ClientError& error) {
      peer_error = error.what();
    }
  });
  ASSERT_TRUE(net::send_message(fd.get(), submit, deadline()).ok());
  ASSERT_TRUE(reader.receive(reply, deadline()).ok());
  peer.join();
  ASSERT_TRUE(reply.has_result());
  const Status status = from_proto(reply.result().status());
  EXPECT_EQ(status.code(), ErrorCode::invalid_argument) << status.to_string();
  EXPECT_NE(status.message().find("region 99"), std::string::npos) << status.message();
  EXPECT_NE(peer_error.find("rank 0: the op names shared-memory region 99"), std::string::npos)
      << peer_error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  // An unknown dtype in an otherwise valid request.
  op.set_request_id(2);
  op.set_dtype(static_cast<proto::DataType>(42));
  std::thread second_peer([&] {
    std::vector<float> data(100, 1.0f);
    EXPECT_THROW(cluster.clients[1].allreduce(data.data(), data.size(), DataType::f32),
                 ClientError);
  });
  ASSERT_TRUE(net::send_message(fd.get(), submit, deadline()).ok());
  ASSERT_TRUE(reader.receive(reply, deadline()).ok());
  second_peer.join();
  EXPECT_NE(reply.result().status().message().find("unknown collective, dtype or reduce op"),
            std::string::npos)
      << reply.result().status().message();

  // An unknown wire type in an otherwise valid request.
  op.set_request_id(3);
  op.set_dtype(to_proto(DataType::f32));
  op.set_wire(static_cast<proto::DataType>(42));
  std::thread third_peer([&] {
    std::vector<float> data(100, 1.0f);
    EXPECT_THROW(cluster.clients[1].allreduce(data.data(), data.size(), DataType::f32),
                 ClientError);
  });
  ASSERT_TRUE(net::send_message(fd.get(), submit, deadline()).ok());
  ASSERT_TRUE(reader.receive(reply, deadline()).ok());
  third_peer.join();
  EXPECT_NE(reply.result().status().message().find("unknown wire type in request 3"),
            std::string::npos)
      << reply.result().status().message();

  // Both daemons still serve, and the next correct op is right. Rank 0's ops come from a new
  // client once the raw one has gone; its op stream starts over, so rank 1's does too.
  fd.reset();
  for (int rank = 0; rank < 2; ++rank) {
    cluster.clients[rank] = Client::connect(cluster.cluster->sockets()[rank]);
  }
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    auto data = testing::contribution(DataType::f32, ReduceOp::sum, rank, 1000);
    client.allreduce(data.data(), 1000, DataType::f32);
    EXPECT_EQ(data, testing::expected_reduction(DataType::f32, ReduceOp::sum, 2, 1000));
  });
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("dropped a client"), std::string::npos);
}

// A raw client of a daemon, past its hello: its ops pair with `partner`'s.
struct RawClient {
  RawClient(const std::string& socket, const Client& partner)
      : fd(raw_connection(socket)), reader(fd.get()), hello(testing::hello_pairing_with(partner)) {
    round_trip();
  }
  static net::Deadline deadline() { return net::Deadline::after(std::chrono::seconds(10)); }

  // A hello and its answer: the daemon has handled everything sent before.
  void round_trip() {
    EXPECT_TRUE(net::send_message(fd.get(), hello, deadline()).ok());
    proto::DaemonToClient reply;
    EXPECT_TRUE(reader.receive(reply, deadline()).ok());
  }

  void attach(std::uint64_t id, int region, std::uint64_t bytes) {
    proto::ClientToDaemon message;
    message.mutable_attach()->set_region_id(id);
    message.mutable_attach()->set_bytes(bytes);
    EXPECT_TRUE(net::send_message(fd.get(), message, deadline(), region).ok());
    round_trip();
  }

  // An f32 all-reduce of `count` on region `id`; its status.
  Status allreduce(std::uint64_t id, std::uint64_t count) {
    proto::ClientToDaemon message;
    proto::SubmitOp& op = *message.mutable_submit();
    op.set_request_id(++requests);
    op.set_region_id(id);
    op.set_collective(to_proto(Collective::allreduce));
    op.set_dtype(to_proto(DataType::f32));
    op.set_op(to_proto(ReduceOp::sum));
    op.set_count(count);
    op.set_timeout_ms(30'000);
    EXPECT_TRUE(net::send_message(fd.get(), message, deadline()).ok());
    proto::DaemonToClient reply;
    if (Status received = reader.receive(reply, deadline()); !received.ok()) return received;
    return from_proto(reply.result().status());
  }

  net::UniqueFd fd;
  net::MessageReader reader;
  const proto::ClientToDaemon hello;
  std::uint64_t requests = 0;
};

// A region its client shrinks after the daemon has mapped it: refused when it comes, since the
// daemon's next access past the new end would die of SIGBUS.
TEST(ClusterClientInput, ARegionThatCanShrinkIsRefused) {
  testing::TestCluster cluster = testing::start_cluster(2);
  RawClient client(cluster.cluster->sockets()[0], cluster.clients[1]);
  net::UniqueFd unsealed(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(unsealed.get(), 1 << 20), 0);
  client.attach(7, unsealed.get(), 1 << 20);
  ASSERT_EQ(::ftruncate(unsealed.get(), 0), 0);  // shrunk behind the daemon's back
  std::string peer_error;
  std::thread peer([&] {
    std::vector<float> data(1 << 18, 1.0f);
    try {
      cluster.clients[1].allreduce(data.data(), data.size(), DataType::f32);
    } catch (const ClientError& error) {
      peer_error = error.what();
    }
  });
  const Status status = client.allreduce(7, 1 << 18);
  peer.join();
  EXPECT_EQ(status.code(), ErrorCode::invalid_argument) << status.to_string();
  EXPECT_NE(status.message().find("region 7"), std::string::npos) << status.message();
  EXPECT_NE(peer_error.find("rank 0:"), std::string::npos) << peer_error;
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("not sealed against shrinking"),
            std::string::npos);
  // A region made by the client library is sealed.
  net::SharedRegion sealed;
  ASSERT_TRUE(net::SharedRegion::create(4096, sealed).ok());
  EXPECT_NE(::ftruncate(sealed.fd(), 0), 0);
  client.fd.reset();
  testing::expect_every_rank_still_serves(cluster);
}

// 2^62 + 16 floats are 2^64 + 64 bytes: 64 once wrapped around, which a region of 64 bytes would
// hold, and the op would run past its end on every rank.
TEST(ClusterClientInput, ACountWhoseBytesOverflowIsRefused) {
  testing::TestCluster cluster = testing::start_cluster(2);
  std::vector<Status> statuses(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      RawClient client(cluster.cluster->sockets()[rank], cluster.clients[rank]);
      net::SharedRegion region;
      ASSERT_TRUE(net::SharedRegion::create(64, region).ok());
      client.attach(1, region.fd(), 64);
      statuses[rank] = client.allreduce(1, (std::uint64_t{1} << 62) + 16);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (const Status& status : statuses) {
    EXPECT_EQ(status.code(), ErrorCode::invalid_argument) << status.to_string();
    EXPECT_NE(status.message().find("more bytes than any region holds"), std::string::npos)
        << status.message();
  }
  testing::expect_every_rank_still_serves(cluster);
}

// A client may attach many regions, but not without end: each is a mapping and a descriptor of
// the daemon's. The one past the limit is refused (the op naming it fails), the others serve.
TEST(ClusterClientInput, AClientCannotAttachRegionsWithoutEnd) {
  testing::TestCluster cluster = testing::start_cluster(1);
  RawClient client(cluster.cluster->sockets()[0], cluster.clients[0]);
  constexpr std::uint64_t kLimit = 4096;
  std::vector<net::SharedRegion> regions(kLimit + 1);
  for (std::uint64_t id = 1; id <= kLimit + 1; ++id) {
    ASSERT_TRUE(net::SharedRegion::create(4096, regions[id - 1]).ok());
    client.attach(id, regions[id - 1].fd(), 4096);
  }
  EXPECT_TRUE(client.allreduce(kLimit, 100).ok());
  const Status refused = client.allreduce(kLimit + 1, 100);
  EXPECT_EQ(refused.code(), ErrorCode::invalid_argument) << refused.to_string();
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("as many as one client may"), std::string::npos);
  client.fd.reset();
  testing::expect_every_rank_still_serves(cluster);
}

// One process holds at most 64 connections to a daemon, each of which costs the daemon a
// descriptor: the one past them is refused with the reason, and the daemon serves on.
TEST(ClusterClientInput, AProcessCannotOpenConnectionsWithoutEnd) {
  testing::TestCluster cluster = testing::start_cluster(1);  // its client holds one
  const std::string socket = cluster.cluster->sockets()[0];
  std::vector<Client> more;
  for (int connection = 2; connection <= 64; ++connection) more.push_back(Client::connect(socket));
  try {
    Client::connect(socket);
    ADD_FAILURE() << "a 65th connection was served";
  } catch (const ClientError& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument) << error.what();
    EXPECT_NE(
        std::string(error.what())
            .find("already holds 64 connections to host 0's daemon, as many as one process may"),
        std::string::npos)
        << error.what();
  }
  more.clear();
  testing::expect_every_rank_still_serves(cluster);
}

// A string field that is not UTF-8 (the op's name): the client is dropped with one line of the
// daemon's own; protobuf's line per message (a hostile client's way to fill the log) is not
// logged at the default level.
TEST(ClusterClientInput, AStringThatIsNotUtf8IsRefusedWithoutFloodingTheLog) {
  testing::TestCluster cluster = testing::start_cluster(1);
  for (int i = 0; i < 3; ++i) {
    net::UniqueFd fd = raw_connection(cluster.cluster->sockets()[0]);
    proto::ClientToDaemon submit;
    submit.mutable_submit()->set_name("\xff\xfe");
    std::string framed;
    // The sending side does not check: what matters is what the daemon does with it.
    submit.SerializeToString(&framed);
    const auto length = static_cast<std::uint32_t>(framed.size());
    framed.insert(0, std::string(reinterpret_cast<const char*>(&length), 4));
    ASSERT_TRUE(net::write_all(fd.get(), std::as_bytes(std::span(framed)),
                               net::Deadline::after(std::chrono::seconds(5)))
                    .ok());
    EXPECT_TRUE(net::wait_readable(fd.get(), net::Deadline::after(std::chrono::seconds(5))));
  }
  testing::expect_every_rank_still_serves(cluster);
  const std::string log = cluster.cluster->log_of_worker(0);
  EXPECT_EQ(log.find("UTF-8"), std::string::npos) << log;
  EXPECT_NE(log.find("dropped a client"), std::string::npos) << log;
}

// A client that asks and asks and reads none of the replies: they queue (up to a bound) instead
// of being written by the rank's op thread, so the submitting client's ops go on at once; the
// reader-less client is dropped on its reply deadline. (Written by the op thread, an all-reduce
// waited up to 10 s behind the first reply that did not fit.)
TEST(ClusterClientInput, AClientThatReadsNoRepliesDelaysNoOp) {
  testing::TestCluster cluster = testing::start_cluster(2);
  net::UniqueFd fd = raw_connection(cluster.cluster->sockets()[0]);
  proto::ClientToDaemon ask;
  ask.mutable_status_request();
  std::string framed;
  ASSERT_TRUE(net::frame_message(ask, framed).ok());
  std::string requests;
  for (int i = 0; i < 20000; ++i) requests += framed;
  ASSERT_TRUE(net::write_all(fd.get(), std::as_bytes(std::span(requests)),
                             net::Deadline::after(std::chrono::seconds(10)))
                  .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the daemon has answered them
  const auto start = std::chrono::steady_clock::now();
  testing::expect_every_rank_still_serves(cluster);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

// At its descriptor limit a worker neither spins on accept nor stops: the connections past the
// limit wait in the listen queue, the CPU stays idle, and once they close the worker serves on.
TEST(ClusterClientInput, AtItsDescriptorLimitAWorkerWaitsWithoutSpinning) {
#ifdef GRADSYNC_SANITIZED
  // A sanitizer's runtime needs descriptors of its own: UBSan's vptr check opens a pipe to see
  // whether memory is readable, and at the limit calls every object invalid. The plain build runs
  // this test.
  GTEST_SKIP() << "not under sanitizers: their runtimes need descriptors at the limit";
#endif
  testing::TestCluster cluster = testing::start_cluster(1);
  const pid_t worker = cluster.cluster->worker(0).pid();
  rlimit original{};
  ASSERT_EQ(::prlimit(worker, RLIMIT_NOFILE, nullptr, &original), 0);
  const auto held = static_cast<rlim_t>(testing::open_descriptors(worker));
  const rlimit tight{held + 4, original.rlim_max};
  ASSERT_EQ(::prlimit(worker, RLIMIT_NOFILE, &tight, nullptr), 0);
  std::vector<net::UniqueFd> connections;
  for (int i = 0; i < 20; ++i) connections.push_back(raw_connection(cluster.cluster->sockets()[0]));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long before = testing::cpu_ticks(worker);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LE(testing::cpu_ticks(worker) - before, 5) << "clock ticks of CPU in one second";
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("cannot accept a client"), std::string::npos);
  connections.clear();
  ASSERT_EQ(::prlimit(worker, RLIMIT_NOFILE, &original, nullptr), 0);
  testing::expect_every_rank_still_serves(cluster);
}

// The client socket is its owner's alone: mode 0600, and a process of another user cannot
// connect (root, which passes any file mode, plays that user in a child).
TEST(ClusterClientInput, AnotherUsersProcessCannotConnect) {
  testing::TestCluster cluster = testing::start_cluster(1);
  const std::string socket = cluster.cluster->sockets()[0];
  struct stat info {};
  ASSERT_EQ(::stat(socket.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  if (::geteuid() != 0) GTEST_SKIP() << "playing another user needs root";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    net::UniqueFd fd;
    const Status status =
        net::connect_unix(socket, net::Deadline::after(std::chrono::seconds(2)), fd);
    ::_exit(!status.ok() && status.message().find("Permission denied") != std::string::npos ? 0
                                                                                            : 1);
  }
  int exit_status = 0;
  ASSERT_EQ(::waitpid(child, &exit_status, 0), child);
  EXPECT_TRUE(WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0)
      << "a process of uid 65534 could connect (or could not become that user)";
  testing::expect_every_rank_still_serves(cluster);
}

}  // namespace
}  // namespace gradsync
