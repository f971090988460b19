// Ops through a client's queue in shared memory (net/op_queue.h): more in flight than the queue
// holds, a failure's reason on the socket beside the queue, and a hostile client that writes
// what it likes in its queue: it is refused or dropped with the reason, and the daemon serves on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "net/op_queue.h"
#include "net/shared_memory.h"
#include "net/socket.h"
#include "proto/convert.h"
#include "support/cluster.h"
#include "support/raw_hello.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

net::Deadline soon() { return net::Deadline::after(std::chrono::seconds(10)); }

// A client speaking the protocol by hand, with a queue of `queue_bytes` bytes; its ops pair with
// `partner`'s.
struct QueueClient {
  QueueClient(const std::string& socket, std::uint64_t queue_bytes, const Client& partner)
      : greeting(testing::hello_pairing_with(partner)) {
    EXPECT_TRUE(net::connect_unix(socket, soon(), fd).ok());
    reader.emplace(fd.get());
    EXPECT_TRUE(net::SharedRegion::create(queue_bytes, region).ok());
    proto::ClientToDaemon attach;
    attach.mutable_attach()->set_op_queue(true);
    attach.mutable_attach()->set_bytes(queue_bytes);
    send(attach, region.fd());
    hello = say_hello();
  }

  proto::DaemonHello say_hello() {
    send(greeting);
    proto::DaemonToClient reply;
    EXPECT_TRUE(reader->receive(reply, soon()).ok());
    return reply.hello();
  }

  void send(const proto::ClientToDaemon& message, int attached = -1) {
    EXPECT_TRUE(net::send_message(fd.get(), message, soon(), attached).ok());
    ++sent;
  }

  void ring() {
    proto::ClientToDaemon doorbell;
    doorbell.mutable_doorbell();
    send(doorbell);
  }

  net::OpQueueLayout& queue() { return *reinterpret_cast<net::OpQueueLayout*>(region.data()); }

  // Publishes `op` in slot `index` by hand, and rings.
  void publish(const net::QueuedOp& op, std::uint64_t index) {
    publish_silently(op, index);
    ring();
  }
  void publish_silently(const net::QueuedOp& op, std::uint64_t index) {
    queue().ops[index % net::kOpQueueSlots] = op;
    std::atomic_ref(queue().submitted).store(index + 1);
  }

  // How many results the daemon has published, once there are `count` or 10 s have passed: a
  // result comes after its reason on the socket.
  std::uint64_t results(std::uint64_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::atomic_ref(queue().completed).load() < count &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return std::atomic_ref(queue().completed).load();
  }

  // The daemon closed the connection.
  bool dropped() {
    proto::DaemonToClient reply;
    while (true) {
      const Status status = reader->receive(reply, soon());
      if (!status.ok()) return status.code() == ErrorCode::peer_lost;
    }
  }

  net::UniqueFd fd;
  std::optional<net::MessageReader> reader;
  const proto::ClientToDaemon greeting;
  net::SharedRegion region;
  proto::DaemonHello hello;
  std::uint64_t sent = 0;
};

net::QueuedOp barrier_op(std::uint64_t request_id, std::uint64_t socket_messages_before) {
  net::QueuedOp op{};
  op.request_id = request_id;
  op.socket_messages_before = socket_messages_before;
  op.collective = to_proto(Collective::barrier);
  op.dtype = to_proto(DataType::u8);
  op.op = to_proto(ReduceOp::sum);
  op.timeout_ms = 30'000;
  return op;
}

// 600 ops in flight on each rank, more than twice what a queue holds, while the other rank has not
// submitted yet: the submitting thread waits for room instead of overwriting, and every op comes
// out right.
TEST(ClusterOpQueue, MoreOpsInFlightThanTheQueueHoldsWaitForRoom) {
  testing::TestCluster cluster = testing::start_cluster(2);
  constexpr int kOps = 600;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<std::vector<std::int32_t>> data(kOps);
    std::vector<Handle> handles;
    for (int i = 0; i < kOps; ++i) {
      data[i] = {rank + i, 1};
      handles.push_back(client.allreduce_async(data[i].data(), 2, DataType::i32));
    }
    for (int i = 0; i < kOps; ++i) {
      handles[i].wait();
      EXPECT_EQ(data[i], (std::vector<std::int32_t>{1 + 2 * i, 2})) << "op " << i;
    }
  });
}

// An op that fails sends its reason on the socket and marks its place in the queue; the next op
// goes on through the queue.
TEST(ClusterOpQueue, AFailedOpsReasonComesBesideTheQueue) {
  testing::TestCluster cluster = testing::start_cluster(2);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    std::vector<float> data(rank == 0 ? 10 : 11, 1.0f);
    try {
      client.allreduce(data.data(), data.size(), DataType::f32);
      ADD_FAILURE() << "ranks with different counts";
    } catch (const ClientError& error) {
      EXPECT_EQ(error.code(), ErrorCode::mismatch) << error.what();
    }
    data.assign(10, 1.0f);
    client.allreduce(data.data(), data.size(), DataType::f32);
    EXPECT_EQ(data, std::vector<float>(10, 2.0f));
  });
}

// An op from the queue is checked as one from the socket: an unknown dtype fails it on both ranks
// with the reason, and the queue's slot says so.
TEST(ClusterOpQueue, AQueuedOpIsCheckedLikeOneOnTheSocket) {
  testing::TestCluster cluster = testing::start_cluster(2);
  QueueClient raw(cluster.cluster->sockets()[0], sizeof(net::OpQueueLayout), cluster.clients[1]);
  ASSERT_TRUE(raw.hello.op_queue());
  std::string peer_error;
  std::thread peer([&] {
    try {
      cluster.clients[1].barrier();
    } catch (const ClientError& error) {
      peer_error = error.what();
    }
  });
  net::QueuedOp op = barrier_op(7, raw.sent);
  op.dtype = 42;
  raw.publish(op, 0);
  proto::DaemonToClient reply;
  do {
    ASSERT_TRUE(raw.reader->receive(reply, soon()).ok());
  } while (!reply.has_result());
  peer.join();
  EXPECT_EQ(reply.result().request_id(), 7u);
  EXPECT_NE(reply.result().status().message().find("unknown collective, dtype or reduce op"),
            std::string::npos)
      << reply.result().status().message();
  EXPECT_FALSE(peer_error.empty());
  ASSERT_EQ(raw.results(1), 1u);
  EXPECT_EQ(raw.queue().results[0].request_id, 7u);
  EXPECT_EQ(raw.queue().results[0].failed, 1);
  raw.fd.reset();
  testing::expect_every_rank_still_serves(cluster);
}

// Reading the socket message an op follows can read the messages behind it too: they are served
// once the queue is empty, though the socket will not say again that they are there. Here the
// daemon reads them while it goes from one op to the next without returning to its event loop.
TEST(ClusterOpQueue, MessagesReadWithTheOneAnOpFollowsAreServed) {
  testing::TestCluster cluster = testing::start_cluster(2);
  QueueClient raw(cluster.cluster->sockets()[0], sizeof(net::OpQueueLayout), cluster.clients[1]);
  ASSERT_TRUE(raw.hello.op_queue());
  raw.publish(barrier_op(1, raw.sent), 0);  // the daemon waits in it for rank 1
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  proto::ClientToDaemon ask;
  ask.mutable_status_request();
  raw.send(ask);
  const std::uint64_t after_first = raw.sent;
  raw.send(ask);
  raw.publish_silently(barrier_op(2, after_first), 1);  // follows the first question only
  std::thread peer([&] {
    cluster.clients[1].barrier();
    cluster.clients[1].barrier();
  });
  int answers = 0;
  Status status;
  while (answers < 2 && status.ok()) {
    proto::DaemonToClient reply;
    status = raw.reader->receive(reply, net::Deadline::after(std::chrono::seconds(5)));
    answers += status.ok() && reply.has_status() ? 1 : 0;
  }
  peer.join();
  EXPECT_EQ(answers, 2) << status.to_string();
  // The daemon takes every published op before it runs any, and serves the socket messages it
  // read meanwhile: the second answer may come before the second op has run, whose result the
  // daemon publishes once rank 1 has come too.
  const net::Deadline deadline = net::Deadline::after(std::chrono::seconds(5));
  while (std::atomic_ref(raw.queue().completed).load() < 2 && !deadline.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(std::atomic_ref(raw.queue().completed).load(), 2u);
}

// A count of published ops far ahead of what the daemon took: the client is dropped, saying why,
// instead of the daemon reading slots nobody wrote without end.
TEST(ClusterOpQueue, ACountTheDaemonCannotFollowDropsOnlyThatClient) {
  testing::TestCluster cluster = testing::start_cluster(2);
  QueueClient raw(cluster.cluster->sockets()[0], sizeof(net::OpQueueLayout), cluster.clients[1]);
  ASSERT_TRUE(raw.hello.op_queue());
  std::atomic_ref(raw.queue().submitted).store(std::uint64_t{1} << 40);
  raw.ring();
  EXPECT_TRUE(raw.dropped());
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("ops published where the daemon has taken 0"),
            std::string::npos)
      << cluster.cluster->log_of_worker(0);
  testing::expect_every_rank_still_serves(cluster);
}

// An op that says it follows socket messages that never came (it could name a region the daemon
// has not seen): the client is dropped, saying so.
TEST(ClusterOpQueue, AnOpAfterSocketMessagesThatNeverCameDropsItsClient) {
  testing::TestCluster cluster = testing::start_cluster(1);
  QueueClient raw(cluster.cluster->sockets()[0], sizeof(net::OpQueueLayout), cluster.clients[0]);
  raw.publish(barrier_op(1, raw.sent + 5), 0);
  EXPECT_TRUE(raw.dropped());
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("follows"), std::string::npos)
      << cluster.cluster->log_of_worker(0);
  testing::expect_every_rank_still_serves(cluster);
}

// A queue smaller than the layout, or a second one: not taken, and the hello says so; the first
// queue goes on serving.
TEST(ClusterOpQueue, AQueueTooSmallOrASecondOneIsNotTaken) {
  testing::TestCluster cluster = testing::start_cluster(1);
  QueueClient small(cluster.cluster->sockets()[0], 4096, cluster.clients[0]);
  EXPECT_FALSE(small.hello.op_queue());
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("bytes, and a queue takes"), std::string::npos);

  QueueClient raw(cluster.cluster->sockets()[0], sizeof(net::OpQueueLayout), cluster.clients[0]);
  ASSERT_TRUE(raw.hello.op_queue());
  net::SharedRegion second;
  ASSERT_TRUE(net::SharedRegion::create(sizeof(net::OpQueueLayout), second).ok());
  proto::ClientToDaemon attach;
  attach.mutable_attach()->set_op_queue(true);
  attach.mutable_attach()->set_bytes(sizeof(net::OpQueueLayout));
  raw.send(attach, second.fd());
  EXPECT_TRUE(raw.say_hello().op_queue());
  EXPECT_NE(cluster.cluster->log_of_worker(0).find("has one already"), std::string::npos);
  raw.publish(barrier_op(1, raw.sent), 0);
  ASSERT_EQ(raw.results(1), 1u);
  EXPECT_EQ(raw.queue().results[0].failed, 0);
}

}  // namespace
}  // namespace gradsync
