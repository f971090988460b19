// Point-to-point messages on real daemons (docs/clients.md, "Point to point"): every rank to every
// other, of several sizes (none, a few bytes, several segments) and tags, at p = 2, 3 and 5 and
// with local ranks ({2, 1, 3}); a ring exchange at p = 5 posted sends first and receives first;
// tags received in another order than sent; a send that waits while both ranks run a collective;
// a subgroup's ranks. Sizes that differ fail on both ranks naming both; a receiver whose client
// leaves, or whose daemon dies, fails its sender at once; every bad argument gets a clear error and
// the daemons serve on.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <numeric>
#include <thread>

#include "support/cluster.h"
#include "support/failures.h"
#include "support/tensor_values.h"
#include "support/test_names.h"

namespace gradsync {
namespace {

using testing::Bytes;

using Layout = std::vector<int>;

// The bytes `from` sends `to` with `tag`.
Bytes message(int from, int to, std::int64_t tag, std::uint64_t bytes) {
  return testing::pattern(from * 1000 + to, static_cast<int>(tag), bytes);
}

class ClusterPointToPoint : public ::testing::TestWithParam<Layout> {};

TEST_P(ClusterPointToPoint, EveryRankSendsEveryOtherItsMessagesWhateverTheirSize) {
  const Layout& layout = GetParam();
  const int p = std::accumulate(layout.begin(), layout.end(), 0);
  testing::TestCluster cluster = testing::start_hosts(layout);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    // Tag 0 and 7 carry messages of every size; 200'000 bytes is several 64 KiB segments.
    const std::vector<std::uint64_t> sizes = {0, 4, 200'000};
    std::vector<Bytes> sent;
    std::vector<Bytes> received;
    std::vector<Handle> handles;
    sent.reserve(2 * sizes.size() * p);
    received.reserve(2 * sizes.size() * p);
    for (const std::int64_t tag : {0, 7}) {
      for (const std::uint64_t size : sizes) {
        for (int peer = 0; peer < p; ++peer) {
          if (peer == rank) continue;
          sent.push_back(message(rank, peer, tag, size));
          handles.push_back(
              client.send_async(sent.back().data(), size / 4, DataType::f32, peer, tag));
          received.emplace_back(size, std::byte{0xCD});
          handles.push_back(
              client.receive_async(received.back().data(), size / 4, DataType::f32, peer, tag));
        }
      }
    }
    for (Handle& handle : handles) {
      try {
        handle.wait();
      } catch (const ClientError& error) {
        failures.record("rank " + std::to_string(rank) + ": " + error.what());
      }
    }
    std::size_t index = 0;
    for (const std::int64_t tag : {0, 7}) {
      for (const std::uint64_t size : sizes) {
        for (int peer = 0; peer < p; ++peer) {
          if (peer == rank) continue;
          if (received[index++] != message(peer, rank, tag, size)) {
            failures.record("rank " + std::to_string(rank) + ": the " + std::to_string(size) +
                            " bytes from rank " + std::to_string(peer) + " with tag " +
                            std::to_string(tag));
          }
        }
      }
    }
  });
  failures.expect_none();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClusterPointToPoint,
                         ::testing::Values(Layout{1, 1}, Layout{1, 1, 1}, Layout{1, 1, 1, 1, 1},
                                           Layout{2, 1, 3}),
                         [](const auto& param) { return testing::layout_name(param.param); });

// Each rank sends its right neighbour 8 MiB, more than the sockets between them hold, and
// receives as much from its left; the ranks post in `sends_first` order.
void ring_exchange(bool sends_first) {
  testing::TestCluster cluster = testing::start_hosts({1, 1, 1, 1, 1});
  testing::Failures failures;
  constexpr std::uint64_t kBytes = 8 << 20;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    const int p = client.world_size();
    const int right = (rank + 1) % p;
    const int left = (rank + p - 1) % p;
    const Bytes out = message(rank, right, 3, kBytes);
    Bytes in(kBytes);
    try {
      Handle send;
      Handle receive;
      if (sends_first) {
        send = client.send_async(out.data(), kBytes, DataType::u8, right, 3);
        receive = client.receive_async(in.data(), kBytes, DataType::u8, left, 3);
      } else {
        receive = client.receive_async(in.data(), kBytes, DataType::u8, left, 3);
        send = client.send_async(out.data(), kBytes, DataType::u8, right, 3);
      }
      send.wait();
      receive.wait();
      if (in != message(left, rank, 3, kBytes)) {
        failures.record("rank " + std::to_string(rank) + ": the bytes from its left");
      }
    } catch (const ClientError& error) {
      failures.record("rank " + std::to_string(rank) + ": " + error.what());
    }
  });
  failures.expect_none();
}

TEST(ClusterPointToPointRing, ARingOfSendsPostedBeforeTheReceivesCompletes) { ring_exchange(true); }

TEST(ClusterPointToPointRing, ARingOfReceivesPostedBeforeTheSendsCompletes) {
  ring_exchange(false);
}

TEST(ClusterPointToPointOrder, MessagesMatchPerTagWhateverOrderTheTagsAreReceivedIn) {
  testing::TestCluster cluster = testing::start_hosts({1, 1});
  testing::Failures failures;
  constexpr std::uint64_t kBytes = 1 << 20;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    try {
      if (rank == 0) {
        std::vector<Bytes> out;
        for (const std::int64_t tag : {1, 2, 1}) out.push_back(message(0, 1, tag, kBytes));
        std::vector<Handle> sends;
        for (std::size_t i = 0; i < out.size(); ++i) {
          sends.push_back(
              client.send_async(out[i].data(), kBytes, DataType::u8, 1, i == 1 ? 2 : 1));
        }
        for (Handle& send : sends) send.wait();
        return;
      }
      // Tag 2 first, blocking: the two messages of tag 1 wait meanwhile.
      Bytes two(kBytes);
      client.receive(two.data(), kBytes, DataType::u8, 0, 2);
      Bytes first(kBytes);
      Bytes second(kBytes);
      client.receive(first.data(), kBytes, DataType::u8, 0, 1);
      client.receive(second.data(), kBytes, DataType::u8, 0, 1);
      if (two != message(0, 1, 2, kBytes) || first != message(0, 1, 1, kBytes) ||
          second != message(0, 1, 1, kBytes)) {
        failures.record("a message landed in another's receive");
      }
    } catch (const ClientError& error) {
      failures.record("rank " + std::to_string(rank) + ": " + error.what());
    }
  });
  failures.expect_none();
}

TEST(ClusterPointToPointOrder, ASendWaitsWhileBothRanksRunACollective) {
  testing::TestCluster cluster = testing::start_hosts({1, 1, 1});
  testing::Failures failures;
  constexpr std::uint64_t kBytes = 4 << 20;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    try {
      const Bytes out = message(0, 1, 0, kBytes);
      Handle send;
      if (rank == 0) send = client.send_async(out.data(), kBytes, DataType::u8, 1);
      std::vector<float> values(1000, 1.0f);
      client.allreduce(values.data(), values.size(), DataType::f32);
      if (values.front() != 3.0f) failures.record("the all-reduce's sum");
      if (rank == 0) send.wait();
      if (rank == 1) {
        Bytes in(kBytes);
        client.receive(in.data(), kBytes, DataType::u8, 0);
        if (in != out) failures.record("the message that waited for the all-reduce");
      }
    } catch (const ClientError& error) {
      failures.record("rank " + std::to_string(rank) + ": " + error.what());
    }
  });
  failures.expect_none();
}

TEST(ClusterPointToPointSubgroup, ASubgroupsRanksNameTheirPeersByTheirSubgroupRanks) {
  testing::TestCluster cluster = testing::start_hosts({1, 1, 1});
  testing::Failures failures;
  const std::vector<int> members = {2, 0};  // subgroup rank 0 is rank 2
  const std::vector<std::string> sockets = cluster.cluster->rank_sockets();
  testing::on_every_rank(cluster, [&](int rank, Client& whole) {
    if (rank == 1) return;
    try {
      Client client = Client::connect(
          sockets[rank], ConnectOptions{std::chrono::seconds(10), whole.local_rank(), whole.job(),
                                        "pair", members});
      const int partner = 1 - client.rank();
      const Bytes out = message(client.rank(), partner, 5, 1000);
      Bytes in(1000);
      Handle receive = client.receive_async(in.data(), 1000, DataType::u8, partner, 5);
      client.send(out.data(), 1000, DataType::u8, partner, 5);
      receive.wait();
      if (in != message(partner, client.rank(), 5, 1000)) {
        failures.record("rank " + std::to_string(rank) + ": the bytes from its partner");
      }
    } catch (const ClientError& error) {
      failures.record("rank " + std::to_string(rank) + ": " + error.what());
    }
  });
  failures.expect_none();
}

TEST(ClusterPointToPointInput, SizesThatDifferFailOnBothRanksNamingBoth) {
  testing::TestCluster cluster = testing::start_hosts({1, 1});
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    std::vector<float> values(8, 1.0f);
    try {
      if (rank == 0) {
        client.send(values.data(), 4, DataType::f32, 1, 9);
      } else {
        client.receive(values.data(), 8, DataType::f32, 0, 9);
      }
      failures.record("rank " + std::to_string(rank) + "'s message succeeded");
    } catch (const ClientError& error) {
      const std::string what = error.what();
      if (error.code() != ErrorCode::mismatch ||
          what.find("rank 0 sends 4 f32, rank 1 receives 8 f32") == std::string::npos) {
        failures.record("rank " + std::to_string(rank) + ": " + what);
      }
    }
  });
  failures.expect_none();
  testing::expect_every_rank_still_serves(cluster);
}

TEST(ClusterPointToPointInput, ASendWhoseReceiverLeavesFailsAtOnce) {
  testing::TestCluster cluster = testing::start_hosts({1, 1});
  // A client that has submitted an op is its stream's on its rank: its end is announced.
  testing::on_every_rank(cluster, [](int, Client& client) { client.barrier(); });
  const Bytes out(16 << 20, std::byte{1});
  Handle send = cluster.clients[0].send_async(out.data(), out.size(), DataType::u8, 1, 0,
                                              OpOptions{.timeout = std::chrono::seconds(60)});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  cluster.clients[1].close();
  const auto began = std::chrono::steady_clock::now();
  testing::expect_client_error([&] { send.wait(); }, ErrorCode::aborted, "left");
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(20));
  testing::expect_every_rank_still_serves(cluster);
}

TEST(ClusterPointToPointInput, ASendWhoseReceiversDaemonDiesFailsAtOnce) {
  testing::TestCluster cluster = testing::start_hosts({1, 1});
  const Bytes out(16 << 20, std::byte{1});
  Handle send = cluster.clients[0].send_async(out.data(), out.size(), DataType::u8, 1, 0,
                                              OpOptions{.timeout = std::chrono::seconds(60)});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(::kill(cluster.cluster->worker(1).pid(), SIGKILL), 0);
  const auto began = std::chrono::steady_clock::now();
  try {
    send.wait();
    ADD_FAILURE() << "the send succeeded";
  } catch (const ClientError& error) {
    EXPECT_NE(error.code(), ErrorCode::deadline_exceeded) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(20));
}

TEST(ClusterPointToPointInput, AMessageThatNoRankMatchesTimesOutSayingWhatItWaitedFor) {
  testing::TestCluster cluster = testing::start_hosts({1, 1});
  std::vector<float> values(4);
  const OpOptions soon{.timeout = std::chrono::milliseconds(500)};
  testing::expect_client_error(
      [&] { cluster.clients[0].send(values.data(), 4, DataType::f32, 1, 0, soon); },
      ErrorCode::deadline_exceeded, "rank 1 has not posted the receive");
  testing::expect_client_error(
      [&] { cluster.clients[1].receive(values.data(), 4, DataType::f32, 0, 4, soon); },
      ErrorCode::deadline_exceeded, "rank 0 has not sent it");
  testing::expect_every_rank_still_serves(cluster);
}

TEST(ClusterPointToPointInput, BadArgumentsAreRefusedSayingWhyAndTheDaemonsServeOn) {
  testing::TestCluster cluster = testing::start_hosts({1, 2});
  Client& client = cluster.clients[0];
  std::vector<float> values(4);
  testing::expect_client_error([&] { client.send(values.data(), 4, DataType::f32, 3); },
                               ErrorCode::invalid_argument, "rank 3 is not a rank of a group of 3");
  testing::expect_client_error([&] { client.receive(values.data(), 4, DataType::f32, -1); },
                               ErrorCode::invalid_argument, "rank -1 is not a rank");
  testing::expect_client_error([&] { client.send(values.data(), 4, DataType::f32, 0); },
                               ErrorCode::invalid_argument, "cannot send to itself");
  testing::expect_client_error([&] { client.send(values.data(), 4, DataType::f32, 1, -1); },
                               ErrorCode::invalid_argument, "tag -1 is out of range");
  testing::expect_client_error(
      [&] { client.receive(values.data(), 4, DataType::f32, 2, std::int64_t{1} << 31); },
      ErrorCode::invalid_argument, "tag 2147483648 is out of range");
  testing::expect_every_rank_still_serves(cluster);
}

}  // namespace
}  // namespace gradsync
