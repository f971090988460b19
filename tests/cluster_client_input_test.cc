// A worker's unix socket fed something wrong: a malformed message drops only that client, and an
// op the daemon cannot start (it names a shared-memory region it never received) fails with a
// clear error on that rank and, through the abort it announces, on the other ranks at once.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "net/socket.h"
#include "proto/convert.h"
#include "support/cluster.h"
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
  proto::ClientToDaemon hello;
  hello.mutable_hello();
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

}  // namespace
}  // namespace gradsync
