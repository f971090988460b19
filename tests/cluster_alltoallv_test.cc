// Alltoallv on real daemons (docs/clients.md, "Collectives"): random splits, zeros among them and
// blocks of several segments, at p = 2, 3 and 5 and with local ranks ({2, 1, 3}, {2, 2}), checked
// block by block on every rank; counts whose two ends disagree fail on every rank, naming the pair,
// and the daemons serve on; a local client that hands its daemon other splits than its partner's
// fails the op with a mismatch instead of having its region read by the partner's splits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "collective/schedule.h"
#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "net/shared_memory.h"
#include "net/socket.h"
#include "proto/convert.h"
#include "support/cluster.h"
#include "support/failures.h"
#include "support/raw_hello.h"
#include "support/tensor_values.h"
#include "support/test_names.h"

namespace gradsync {
namespace {

using testing::Bytes;

// By host, how many ranks each daemon serves.
using Layout = std::vector<int>;

// The same splits on every rank: from one seed, up to `most` elements, a third of them zero.
std::vector<std::uint64_t> splits_for(int p, std::uint64_t most, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<std::uint64_t> count(0, most);
  std::vector<std::uint64_t> splits(static_cast<std::size_t>(p) * p);
  for (auto& split : splits) split = random() % 3 == 0 ? 0 : count(random);
  return splits;
}

class ClusterAlltoallv : public ::testing::TestWithParam<Layout> {};

TEST_P(ClusterAlltoallv, EveryBlockReachesItsRankWhateverItsLength) {
  const Layout& layout = GetParam();
  const int p = std::accumulate(layout.begin(), layout.end(), 0);
  testing::TestCluster cluster = testing::start_hosts(layout);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    unsigned seed = 1;
    for (const std::uint64_t most : {0ull, 3ull, 1000ull, 100'000ull}) {
      for (const DataType type : {DataType::i16, DataType::f32}) {
        const std::string where = " (rank " + std::to_string(rank) + ", splits up to " +
                                  std::to_string(most) + " " + std::string(name(type)) + ")";
        const OpShape shape = alltoallv_shape(p, splits_for(p, most, seed++), element_size(type));
        std::vector<std::uint64_t> send_counts(p);
        std::vector<std::uint64_t> recv_counts(p);
        Bytes input;
        for (int peer = 0; peer < p; ++peer) {
          send_counts[peer] = split(shape, rank, peer);
          recv_counts[peer] = split(shape, peer, rank);
          const Bytes block = testing::pattern(rank, peer, send_counts[peer] * shape.element_size);
          input.insert(input.end(), block.begin(), block.end());
        }
        Bytes output(output_bytes(shape, rank), std::byte{0xCD});
        try {
          client.alltoallv(input.data(), send_counts, output.data(), recv_counts, type);
        } catch (const ClientError& error) {
          failures.record(error.what() + where);
          continue;
        }
        std::uint64_t at = 0;
        for (int from = 0; from < p; ++from) {
          const Bytes expected =
              testing::pattern(from, rank, recv_counts[from] * shape.element_size);
          if (!std::equal(expected.begin(), expected.end(), output.begin() + at)) {
            failures.record("the block from rank " + std::to_string(from) + where);
          }
          at += expected.size();
        }
      }
    }
  });
  failures.expect_none();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClusterAlltoallv,
                         ::testing::Values(Layout{1, 1}, Layout{1, 1, 1}, Layout{1, 1, 1, 1, 1},
                                           Layout{2, 1, 3}, Layout{2, 2}),
                         [](const auto& param) { return testing::layout_name(param.param); });

TEST(ClusterAlltoallvInput, CountsThatDisagreeFailOnEveryRankNamingThePairAndTheDaemonsServeOn) {
  testing::TestCluster cluster = testing::start_hosts({1, 2});
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    // Every rank sends one element to each; rank 2 expects two from rank 0.
    const std::vector<std::uint64_t> send_counts(3, 1);
    std::vector<std::uint64_t> recv_counts(3, 1);
    if (rank == 2) recv_counts[0] = 2;
    std::vector<float> input(3, 1.0f);
    std::vector<float> output(4, 0.0f);
    try {
      client.alltoallv(input.data(), send_counts, output.data(), recv_counts, DataType::f32);
      failures.record("rank " + std::to_string(rank) + "'s alltoallv succeeded");
    } catch (const ClientError& error) {
      const std::string what = error.what();
      if (error.code() != ErrorCode::invalid_argument ||
          what.find("rank 0 sends 1 elements to rank 2, which expects 2") == std::string::npos) {
        failures.record("rank " + std::to_string(rank) + ": " + what);
      }
    }
  });
  failures.expect_none();
  testing::expect_every_rank_still_serves(cluster);
}

TEST(ClusterAlltoallvInput, ACountListOfTheWrongLengthIsRefusedSayingSo) {
  testing::TestCluster cluster = testing::start_hosts({1, 1});
  const std::vector<std::uint64_t> three(3, 0);
  const std::vector<std::uint64_t> two(2, 0);
  testing::expect_client_error(
      [&] { cluster.clients[0].alltoallv(nullptr, three, nullptr, two, DataType::f32); },
      ErrorCode::invalid_argument, "each of the 2 ranks; got 3 and 2");
  testing::expect_every_rank_still_serves(cluster);
}

net::Deadline soon() { return net::Deadline::after(std::chrono::seconds(10)); }

// A client speaking the protocol by hand on the socket: it writes what it likes in its regions.
struct RawClient {
  // Its ops pair with `partner`'s, as local rank `local_rank`; with a stream named, on that stream.
  RawClient(const std::string& socket, int local_rank, const Client& partner,
            const std::string& stream = "") {
    EXPECT_TRUE(net::connect_unix(socket, soon(), fd).ok());
    reader.emplace(fd.get());
    proto::ClientToDaemon hello = testing::hello_pairing_with(partner);
    hello.mutable_hello()->set_local_rank(local_rank);
    if (!stream.empty()) hello.mutable_hello()->set_stream(stream);
    send(hello);
    proto::DaemonToClient reply;
    EXPECT_TRUE(reader->receive(reply, soon()).ok());
    EXPECT_TRUE(reply.has_hello()) << reply.DebugString();
  }

  void send(const proto::ClientToDaemon& message, int attached = -1) {
    EXPECT_TRUE(net::send_message(fd.get(), message, soon(), attached).ok());
  }

  // Submits an op on a new region holding `values` (of `region_bytes` bytes, at most all of
  // them; 0: all of them), and returns its result's status.
  proto::Status run(proto::SubmitOp op, const std::vector<std::uint64_t>& values,
                    std::uint64_t region_bytes = 0) {
    net::SharedRegion& region = regions.emplace_back();
    if (region_bytes == 0) region_bytes = values.size() * 8;
    EXPECT_TRUE(net::SharedRegion::create(region_bytes, region).ok());
    std::memcpy(region.data(), values.data(),
                std::min<std::uint64_t>(region_bytes, values.size() * 8));
    proto::ClientToDaemon attach;
    attach.mutable_attach()->set_region_id(regions.size());
    attach.mutable_attach()->set_bytes(region.size());
    send(attach, region.fd());
    op.set_request_id(regions.size());
    op.set_region_id(regions.size());
    op.set_op(to_proto(ReduceOp::sum));
    op.set_timeout_ms(10'000);
    proto::ClientToDaemon submit;
    *submit.mutable_submit() = op;
    send(submit);
    proto::DaemonToClient reply;
    do {
      EXPECT_TRUE(reader->receive(reply, soon()).ok());
    } while (!reply.has_result());
    return reply.result().status();
  }

  net::UniqueFd fd;
  std::optional<net::MessageReader> reader;
  std::vector<net::SharedRegion> regions;
};

// Local rank 1 agrees to the counts {1, 1} of every rank in the all-gather, then hands its daemon
// splits that differ from them but have the same largest count. Local rank 0's region would be
// read and written by local rank 1's splits; instead both ops fail naming the two.
TEST(ClusterAlltoallvInput, ALocalClientWhoseSplitsDifferFromItsPartnersFailsTheOpWithAMismatch) {
  testing::TestCluster cluster = testing::start_hosts({2});
  const std::string socket = cluster.cluster->sockets()[0];
  Client partner = Client::connect(
      socket, ConnectOptions{std::chrono::seconds(10), 0, cluster.clients[0].job(), "hostile", {}});
  RawClient raw(socket, 1, partner);
  std::string partner_error;
  std::thread thread([&] {
    const std::vector<std::uint64_t> ones = {1, 1};
    std::vector<float> input = {1.0f, 2.0f};
    std::vector<float> output(2);
    try {
      partner.alltoallv(input.data(), ones, output.data(), ones, DataType::f32);
    } catch (const ClientError& error) {
      partner_error = error.what();
    }
  });
  proto::SubmitOp gather;
  gather.set_collective(to_proto(Collective::allgather));
  gather.set_dtype(to_proto(DataType::i64));
  gather.set_count(8);
  // The rows of both ranks, its own second: what the library's all-gather would hand over.
  EXPECT_TRUE(raw.run(gather, {1, 1, 1, 1, 1, 1, 1, 1}).code() == proto::Status::OK);
  proto::SubmitOp alltoallv;
  alltoallv.set_collective(to_proto(Collective::alltoallv));
  alltoallv.set_dtype(to_proto(DataType::f32));
  // Splits {0, 1; 1, 1}, then a data and an output of 2 f32 each (one u64 apiece).
  const proto::Status status = raw.run(alltoallv, {0, 1, 1, 1, 0, 0});
  thread.join();
  EXPECT_EQ(status.code(), proto::Status::MISMATCH) << status.message();
  EXPECT_NE(partner_error.find("splits tagged"), std::string::npos) << partner_error;
  raw.fd.reset();
  partner.close();
  testing::expect_every_rank_still_serves(cluster);
}

// The daemon reads an alltoallv's splits from its region before anything else: a region too short
// to hold them, and a split no region could hold, are refused saying so, and the daemon serves on.
TEST(ClusterAlltoallvInput, SplitsTheRegionCannotHoldAreRefusedSayingWhy) {
  testing::TestCluster cluster = testing::start_hosts({1});
  RawClient raw(cluster.cluster->sockets()[0], 0, cluster.clients[0], "raw");
  proto::SubmitOp alltoallv;
  alltoallv.set_collective(to_proto(Collective::alltoallv));
  alltoallv.set_dtype(to_proto(DataType::f32));
  proto::Status status = raw.run(alltoallv, {1}, 4);
  EXPECT_EQ(status.code(), proto::Status::INVALID_ARGUMENT) << status.message();
  EXPECT_NE(status.message().find("needs its region to start with its 1 splits (8 bytes); region 1 "
                                  "has 4"),
            std::string::npos)
      << status.message();
  status = raw.run(alltoallv, {std::uint64_t{1} << 62, 0, 0});
  EXPECT_EQ(status.code(), proto::Status::INVALID_ARGUMENT) << status.message();
  EXPECT_NE(status.message().find("alltoallv split from rank 0 to rank 0 is 4611686018427387904 "
                                  "elements, more than any region holds"),
            std::string::npos)
      << status.message();
  raw.fd.reset();
  testing::expect_every_rank_still_serves(cluster);
}

}  // namespace
}  // namespace gradsync
