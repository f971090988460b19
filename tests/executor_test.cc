// The engine runs real schedules over in-process socket pairs (no TCP), and over channels in
// memory: every rank is a thread.
#include "engine/executor.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "collective/algorithms.h"
#include "collective/reduce_kernels.h"
#include "collective/wire_type.h"
#include "net/socket.h"
#include "net/socket_channels.h"
#include "support/memory_channels.h"
#include "support/tensor_values.h"

namespace gradsync::engine {
namespace {

using gradsync::testing::Bytes;

// Every pair of p ranks joined by a socketpair: sockets[a][b] is a's end of its connection to b.
std::vector<std::vector<net::UniqueFd>> socket_pairs(int p) {
  std::vector<std::vector<net::UniqueFd>> sockets(p);
  for (auto& row : sockets) row.resize(p);
  for (int a = 0; a < p; ++a) {
    for (int b = a + 1; b < p; ++b) {
      int pair[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair), 0);
      sockets[a][b].reset(pair[0]);
      sockets[b][a].reset(pair[1]);
    }
  }
  return sockets;
}

PeerMesh socket_mesh(int rank, std::vector<net::UniqueFd> sockets) {
  const int p = static_cast<int>(sockets.size());
  return PeerMesh(rank, p, 1, std::make_unique<net::SocketChannels>(std::move(sockets)));
}

// One PeerMesh per rank, every pair joined by a socketpair.
std::vector<PeerMesh> connected_meshes(int p) {
  auto sockets = socket_pairs(p);
  std::vector<PeerMesh> meshes;
  for (int r = 0; r < p; ++r) meshes.push_back(socket_mesh(r, std::move(sockets[r])));
  return meshes;
}

// Rank 0's mesh in a group of two, and rank 1's end of their connection, for a test to play
// rank 1 by hand.
std::pair<PeerMesh, net::UniqueFd> mesh_and_hand_played_peer() {
  auto sockets = socket_pairs(2);
  net::UniqueFd peer = std::move(sockets[1][0]);
  return {socket_mesh(0, std::move(sockets[0])), std::move(peer)};
}

// The header of a data frame of generation 1 for op `op_id`, as a hand-played peer sends it.
FrameHeader frame_of_op(std::uint64_t op_id, std::uint64_t length) {
  FrameHeader frame;
  frame.generation = 1;
  frame.op.place = op_id;
  frame.length = length;
  return frame;
}

void send_by_hand(const net::UniqueFd& socket, std::span<const std::byte> bytes) {
  ASSERT_TRUE(
      net::write_all(socket.get(), bytes, net::Deadline::after(std::chrono::seconds(1))).ok());
}

// Runs `body(rank)` on one thread per rank.
void on_every_rank(int p, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) threads.emplace_back(body, r);
  for (auto& thread : threads) thread.join();
}

ExecuteOptions options_for(const OpShape& shape, Algorithm algorithm, DataType type, ReduceOp op,
                           std::uint64_t op_id, std::size_t segment_bytes) {
  ExecuteOptions options;
  options.descriptor = {
      shape.collective, type, op, algorithm, static_cast<std::uint32_t>(shape.root), shape.count};
  options.op.place = op_id;
  options.segment_bytes = segment_bytes;
  options.deadline = net::Deadline::after(std::chrono::seconds(20));
  return options;
}

using OpCase = std::tuple<std::uint64_t, DataType, ReduceOp>;

// Runs `ops` back to back on `meshes`, one per rank, and checks every rank's result.
void expect_closed_form_results(Algorithm algorithm, std::vector<PeerMesh> meshes,
                                const std::vector<OpCase>& ops, std::size_t segment_bytes) {
  const int p = static_cast<int>(meshes.size());
  std::vector<std::vector<Status>> statuses(p, std::vector<Status>(ops.size()));
  std::vector<std::vector<Bytes>> results(p, std::vector<Bytes>(ops.size()));
  on_every_rank(p, [&](int r) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto [n, type, op] = ops[i];
      const OpShape shape{Collective::allreduce, p, n, element_size(type)};
      Bytes data = gradsync::testing::contribution(type, op, r, n);
      statuses[r][i] =
          execute(build_schedule(shape, algorithm, r), {data.data(), nullptr}, meshes[r],
                  options_for(shape, algorithm, type, op, i + 1, segment_bytes));
      results[r][i] = std::move(data);
    }
  });
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto [n, type, op] = ops[i];
    const Bytes expected = gradsync::testing::expected_reduction(type, op, p, n);
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(statuses[r][i].ok()) << statuses[r][i].to_string();
      ASSERT_EQ(results[r][i], expected)
          << "rank " << r << " n=" << n << " " << name(type) << " " << name(op);
    }
  }
}

class ExecutorAllreduce : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(ExecutorAllreduce, MatchesTheClosedFormOverSocketPairs) {
  const auto [algorithm, p] = GetParam();
  // Several ops back to back on the same mesh, multi-segment (a 64-byte segment).
  const std::set<std::uint64_t> counts = {0, 1, static_cast<std::uint64_t>(p) - 1, 1000, 4099};
  std::vector<OpCase> ops;
  for (std::uint64_t n : counts) {
    for (DataType type : {DataType::f32, DataType::bf16, DataType::i64}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg})
        ops.emplace_back(n, type, op);
    }
  }
  expect_closed_form_results(algorithm, connected_meshes(p), ops, 64);
}

// Segments larger than the read-ahead buffer, and tiny ops between them: a frame's payload
// arrives partly with its header and partly straight from the socket, and a read that ends one
// frame may carry the next frames' headers.
TEST_P(ExecutorAllreduce, LargeAndTinyFramesShareAStream) {
  const auto [algorithm, p] = GetParam();
  const std::vector<OpCase> ops = {{1, DataType::f32, ReduceOp::sum},
                                   {200'003, DataType::f32, ReduceOp::sum},
                                   {3, DataType::i64, ReduceOp::max},
                                   {70'001, DataType::bf16, ReduceOp::avg},
                                   {2, DataType::f32, ReduceOp::sum}};
  expect_closed_form_results(algorithm, connected_meshes(p), ops, 10'000);
}

INSTANTIATE_TEST_SUITE_P(
    AllAlgorithms, ExecutorAllreduce,
    ::testing::Combine(::testing::ValuesIn(algorithms_for(Collective::allreduce).begin(),
                                           algorithms_for(Collective::allreduce).end()),
                       ::testing::Values(1, 2, 3, 4, 5, 7, 8)),
    [](const auto& param_info) {
      return std::string(name(std::get<0>(param_info.param))) + "_p" +
             std::to_string(std::get<1>(param_info.param));
    });

// Ranks 0 and 1 of three run an all-reduce on `meshes` whose rank 2 is gone: both fail naming it.
void expect_ranks_0_and_1_lose_rank_2(std::vector<PeerMesh>& meshes) {
  const int p = 3;
  std::vector<Status> statuses(2);
  on_every_rank(2, [&](int r) {
    const OpShape shape{Collective::allreduce, p, 1000, 4};
    Bytes data(4000);
    statuses[r] =
        execute(build_schedule(shape, Algorithm::ring, r), {data.data(), nullptr}, meshes[r],
                options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 256));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), ErrorCode::peer_lost) << statuses[r].to_string();
    EXPECT_NE(statuses[r].message().find("rank 2"), std::string::npos) << statuses[r].message();
  }
}

// The same ops over channels in memory that move one byte, or 7, per call and hold 100 bytes:
// every frame arrives cut at every place, and every sender meets a full channel, where a rank
// that finished its sends before it read would never finish.
class ExecutorOverMemory
    : public ::testing::TestWithParam<std::tuple<Algorithm, int, std::size_t>> {};

TEST_P(ExecutorOverMemory, MatchesTheClosedFormWithFramesCutAnywhere) {
  const auto [algorithm, p, bytes_per_call] = GetParam();
  gradsync::testing::MemoryNetwork network(p, {100, bytes_per_call});
  std::vector<PeerMesh> meshes;
  for (int r = 0; r < p; ++r) meshes.emplace_back(r, p, 1, network.channels_of(r));
  std::vector<OpCase> ops;
  for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{257}}) {
    ops.emplace_back(n, DataType::f32, ReduceOp::sum);
    ops.emplace_back(n, DataType::i64, ReduceOp::max);
    ops.emplace_back(n, DataType::bf16, ReduceOp::avg);
  }
  expect_closed_form_results(algorithm, std::move(meshes), ops, 64);
}

INSTANTIATE_TEST_SUITE_P(
    AllAlgorithms, ExecutorOverMemory,
    ::testing::Combine(::testing::ValuesIn(algorithms_for(Collective::allreduce).begin(),
                                           algorithms_for(Collective::allreduce).end()),
                       ::testing::Values(1, 2, 3, 5, 8), ::testing::Values(1, 7)),
    [](const auto& param_info) {
      return std::string(name(std::get<0>(param_info.param))) + "_p" +
             std::to_string(std::get<1>(param_info.param)) + "_" +
             std::to_string(std::get<2>(param_info.param)) + "_bytes_per_call";
    });

// A rank whose channels close while its peers run: they fail naming it, as over sockets.
TEST(Executor, ALostPeerFailsTheOpOverMemoryToo) {
  const int p = 3;
  gradsync::testing::MemoryNetwork network(p, {});
  std::vector<PeerMesh> meshes;
  for (int r = 0; r < p; ++r) meshes.emplace_back(r, p, 1, network.channels_of(r));
  meshes[2].channels().disconnect(0);
  meshes[2].channels().disconnect(1);
  expect_ranks_0_and_1_lose_rank_2(meshes);
}

// The largest resident set this process has had, in bytes.
std::uint64_t peak_resident_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

// A hypercube exchange reduces into the very bytes it sends; neither that nor a 16-bit wire makes
// an op copy its tensor: two ranks' 64 MiB all-reduces grow the process by less than 24 MiB (it
// grew by the two ranks' snapshots, 128 MiB, when a round sent from a copy of what it sent).
TEST(Executor, AHypercubeAllreduceCopiesNoTensor) {
  const int p = 2;
  const std::uint64_t n = 16 << 20;  // 64 MiB of f32
  auto meshes = connected_meshes(p);
  std::vector<Bytes> data(p);
  for (int r = 0; r < p; ++r) {
    data[r] = gradsync::testing::contribution(DataType::f32, ReduceOp::sum, r, n);
  }
  const std::uint64_t resident_before = peak_resident_bytes();
  std::vector<Status> statuses(p);
  on_every_rank(p, [&](int r) {
    const OpShape shape{Collective::allreduce, p, n, 4};
    for (const std::uint64_t op : {1, 2}) {
      ExecuteOptions options =
          options_for(shape, Algorithm::hypercube, DataType::f32, ReduceOp::sum, op, 256 << 10);
      if (op == 2) options.descriptor.wire = DataType::bf16;
      const Status status = execute(build_schedule(shape, Algorithm::hypercube, r),
                                    {data[r].data(), nullptr}, meshes[r], options);
      if (!status.ok()) statuses[r] = status;
    }
  });
  const std::uint64_t growth = peak_resident_bytes() - resident_before;
  for (int r = 0; r < p; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].to_string();
  EXPECT_EQ(data[0], data[1]);
  EXPECT_LT(growth, std::uint64_t{24} << 20);
}

// Once an op is over, the mesh keeps no buffer larger than a few segments.
TEST(Executor, NoTensorSizedBufferOutlivesItsOp) {
  const int p = 2;
  const std::uint64_t n = 1 << 20;  // 4 MiB of f32
  const std::size_t segment = 64 << 10;
  auto meshes = connected_meshes(p);
  std::vector<Status> statuses(p);
  on_every_rank(p, [&](int r) {
    const OpShape shape{Collective::allreduce, p, n, 4};
    Bytes data = gradsync::testing::contribution(DataType::f32, ReduceOp::sum, r, n);
    statuses[r] =
        execute(build_schedule(shape, Algorithm::hypercube, r), {data.data(), nullptr}, meshes[r],
                options_for(shape, Algorithm::hypercube, DataType::f32, ReduceOp::sum, 1, segment));
    EXPECT_EQ(data, gradsync::testing::expected_reduction(DataType::f32, ReduceOp::sum, p, n));
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].to_string();
    EXPECT_LE(meshes[r].workspace().held_bytes(), 3 * kKeptWorkspaceSegments * segment);
  }
}

// Runs a Bruck all-to-all of 7 f32 per block in 8-byte segments on `meshes` and checks where
// every block ends.
void expect_bruck_moves_every_block(std::vector<PeerMesh>& meshes) {
  const int p = static_cast<int>(meshes.size());
  const OpShape shape{Collective::alltoall, p, 7, 4};
  std::vector<Bytes> outputs(p);
  std::vector<Status> statuses(p);
  on_every_rank(p, [&](int r) {
    Bytes data;
    for (int j = 0; j < p; ++j) {
      const Bytes block = gradsync::testing::pattern(r, j, 28);
      data.insert(data.end(), block.begin(), block.end());
    }
    outputs[r].resize(data.size());
    statuses[r] = execute(build_schedule(shape, Algorithm::bruck, r),
                          {data.data(), outputs[r].data()}, meshes[r],
                          options_for(shape, Algorithm::bruck, DataType::f32, ReduceOp::sum, 1, 8));
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r].to_string();
    for (int i = 0; i < p; ++i) {
      EXPECT_EQ(Bytes(outputs[r].begin() + i * 28, outputs[r].begin() + (i + 1) * 28),
                gradsync::testing::pattern(i, r, 28))
          << "p=" << p << " rank " << r << " block " << i;
    }
  }
}

TEST(Executor, BruckAlltoallMovesEveryBlock) {
  auto meshes = connected_meshes(5);
  expect_bruck_moves_every_block(meshes);
}

// Bruck's hops land where the same round sends from (schedule.h): with no scratch buffer, a
// received segment is held until the sent one is out. Over channels that take 1 or 7 bytes a call
// and hold 100, a sender meets a full channel while its receiver holds a segment.
TEST(Executor, BruckAlltoallNeedsNoScratchAndHoldsSegmentsWithoutDeadlock) {
  for (const int p : {2, 3, 5, 8}) {
    EXPECT_EQ(build_schedule({Collective::alltoall, p, 1000, 4}, Algorithm::bruck, 0)
                  .size_of(BufferId::scratch),
              0u);
    for (const std::size_t bytes_per_call : {std::size_t{1}, std::size_t{7}}) {
      gradsync::testing::MemoryNetwork network(p, {100, bytes_per_call});
      std::vector<PeerMesh> meshes;
      for (int r = 0; r < p; ++r) meshes.emplace_back(r, p, 1, network.channels_of(r));
      expect_bruck_moves_every_block(meshes);
    }
  }
}

// Rank 1 played by hand, to see which frames rank 0 sends when.
class HandPlayedPeer {
 public:
  HandPlayedPeer(int fd, const ExecuteOptions& options) : fd_(fd), options_(options) {}

  void send(std::uint32_t round, std::uint32_t segment, std::uint64_t offset,
            const Bytes& payload) {
    FrameHeader header;
    header.generation = 1;
    header.op = options_.op;
    header.round = round;
    header.segment = segment;
    header.offset = offset;
    header.length = payload.size();
    header.descriptor = options_.descriptor;
    const EncodedHeader bytes = encode(header);
    ASSERT_TRUE(net::write_all(fd_, bytes, deadline()).ok());
    ASSERT_TRUE(net::write_all(fd_, payload, deadline()).ok());
  }

  // The next frame rank 0 sends, which must be `segment` of `round`; returns its payload.
  Bytes receive(std::uint32_t round, std::uint32_t segment) {
    EncodedHeader bytes;
    FrameHeader header;
    const Status got = net::read_exact(fd_, bytes, deadline());
    EXPECT_TRUE(got.ok()) << "waiting for round " << round << " segment " << segment << ": "
                          << got.to_string();
    if (!got.ok() || !decode(bytes, header).ok()) return {};
    EXPECT_EQ(header.round, round);
    EXPECT_EQ(header.segment, segment);
    Bytes payload(header.length);
    EXPECT_TRUE(net::read_exact(fd_, payload, deadline()).ok());
    return payload;
  }

 private:
  static net::Deadline deadline() { return net::Deadline::after(std::chrono::seconds(2)); }
  int fd_;
  const ExecuteOptions& options_;
};

// Round 0 receives two segments, round 1 sends them on: each goes out as soon as it is in, not
// once the whole round is (docs/architecture.md §4.2).
TEST(Executor, ASegmentIsForwardedBeforeItsRoundEnds) {
  auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
  const std::uint64_t segment = 4096;
  const OpShape shape{Collective::allreduce, 2, 2 * segment / 4, 4};
  Schedule schedule = empty_schedule(shape, Algorithm::ring, 0);
  const Span whole{BufferId::data, 0, 2 * segment};
  schedule.add_round().recv_copy(1, whole);
  schedule.add_round().send(1, whole);
  const ExecuteOptions options =
      options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, segment);
  Bytes data(2 * segment);
  Status status;
  std::thread rank0([&] { status = execute(schedule, {data.data(), nullptr}, mesh, options); });
  HandPlayedPeer rank1(rank1_socket.get(), options);
  const Bytes first = gradsync::testing::pattern(1, 0, segment);
  const Bytes second = gradsync::testing::pattern(1, 1, segment);
  rank1.send(0, 0, 0, first);
  EXPECT_EQ(rank1.receive(1, 0), first);  // while the second segment of round 0 is outstanding
  rank1.send(0, 1, segment, second);
  EXPECT_EQ(rank1.receive(1, 1), second);
  rank0.join();
  EXPECT_TRUE(status.ok()) << status.to_string();
}

// Round 0 sends a tensor larger than the socket holds, round 1 receives into the same bytes, and
// the peer sends round 1 at once: those frames must wait until round 0's bytes are all out.
TEST(Executor, AnEarlyReceiveWaitsUntilItsBytesAreSent) {
  auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
  const std::uint64_t bytes = 8 << 20, segment = 64 << 10;
  const OpShape shape{Collective::allreduce, 2, bytes / 4, 4};
  Schedule schedule = empty_schedule(shape, Algorithm::ring, 0);
  const Span whole{BufferId::data, 0, bytes};
  schedule.add_round().send(1, whole);
  schedule.add_round().recv_copy(1, whole);
  const ExecuteOptions options =
      options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, segment);
  const Bytes original = gradsync::testing::pattern(0, 0, bytes);
  const Bytes replacement = gradsync::testing::pattern(1, 1, bytes);
  Bytes data = original;
  Status status;
  std::thread rank0([&] { status = execute(schedule, {data.data(), nullptr}, mesh, options); });
  HandPlayedPeer rank1(rank1_socket.get(), options);
  std::thread writer([&] {
    for (std::uint64_t offset = 0; offset < bytes; offset += segment) {
      rank1.send(1, static_cast<std::uint32_t>(offset / segment), offset,
                 Bytes(replacement.begin() + offset, replacement.begin() + offset + segment));
    }
  });
  Bytes sent;
  for (std::uint64_t offset = 0; offset < bytes; offset += segment) {
    const Bytes payload = rank1.receive(0, static_cast<std::uint32_t>(offset / segment));
    sent.insert(sent.end(), payload.begin(), payload.end());
  }
  writer.join();
  rank0.join();
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_TRUE(sent == original) << "round 1 overwrote bytes that round 0 had not sent yet";
  EXPECT_TRUE(data == replacement);
}

TEST(Executor, AMismatchedCountFailsEveryRankNamingBothSides) {
  const int p = 4;
  auto meshes = connected_meshes(p);
  std::vector<Status> statuses(p);
  on_every_rank(p, [&](int r) {
    const std::uint64_t n = r == 2 ? 999 : 1000;  // rank 2 disagrees
    const OpShape shape{Collective::allreduce, p, n, 4};
    Bytes data(n * 4);
    statuses[r] =
        execute(build_schedule(shape, Algorithm::ring, r), {data.data(), nullptr}, meshes[r],
                options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 256));
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(statuses[r].code(), ErrorCode::mismatch)
        << "rank " << r << ": " << statuses[r].to_string();
    EXPECT_NE(statuses[r].message().find("allreduce of 999 f32"), std::string::npos)
        << statuses[r].message();
    EXPECT_NE(statuses[r].message().find("allreduce of 1000 f32"), std::string::npos)
        << statuses[r].message();
  }
  // The mesh survives: the next op, submitted alike everywhere, succeeds.
  on_every_rank(p, [&](int r) {
    const OpShape shape{Collective::allreduce, p, 10, 4};
    Bytes data = gradsync::testing::contribution(DataType::f32, ReduceOp::sum, r, 10);
    statuses[r] =
        execute(build_schedule(shape, Algorithm::ring, r), {data.data(), nullptr}, meshes[r],
                options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 2, 256));
    EXPECT_EQ(data, gradsync::testing::expected_reduction(DataType::f32, ReduceOp::sum, p, 10));
  });
  for (int r = 0; r < p; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r].to_string();
}

TEST(Executor, ALostPeerFailsTheOpNamingIt) {
  const int p = 3;
  auto meshes = connected_meshes(p);
  meshes[2] = socket_mesh(2, std::vector<net::UniqueFd>(p));  // rank 2 dies: its sockets close
  expect_ranks_0_and_1_lose_rank_2(meshes);
}

// A peer that sends an abort whose error code is OK, or no code at all: the op fails with a
// protocol error naming the code; it neither succeeds nor brings the daemon down.
TEST(Executor, AnAbortThatIsNotAFailureIsAProtocolError) {
  const auto past_the_last = static_cast<std::uint32_t>(ErrorCode::internal) + 1;
  for (const std::uint32_t code : {0u, past_the_last, 255u}) {
    auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
    const OpShape shape{Collective::allreduce, 2, 10, 4};
    FrameHeader abort = frame_of_op(1, 4);
    abort.kind = FrameKind::abort;
    abort.segment = code;
    send_by_hand(rank1_socket, encode(abort));
    send_by_hand(rank1_socket, std::as_bytes(std::span("evil", 4)));
    Bytes data(40);
    const Status status =
        execute(build_schedule(shape, Algorithm::ring, 0), {data.data(), nullptr}, mesh,
                options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 256));
    EXPECT_EQ(status.code(), ErrorCode::peer_lost) << status.to_string();
    EXPECT_NE(status.message().find("an abort with error code " + std::to_string(code)),
              std::string::npos)
        << status.message();
  }
}

// A peer that stops in the middle of a frame (here after 30 bytes of its header) is lost after
// the stall timeout, long before the op's deadline; one that sends nothing at all is only late
// (ASilentPeerHitsTheDeadline).
TEST(Executor, APeerThatStopsMidFrameIsLostAfterTheStallTimeout) {
  auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
  const OpShape shape{Collective::allreduce, 2, 1000, 4};
  const EncodedHeader header = encode(frame_of_op(1, 2000));
  send_by_hand(rank1_socket, std::span(header).first(30));
  Bytes data(4000);
  ExecuteOptions options =
      options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 1 << 20);
  options.stall_timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  const Status status =
      execute(build_schedule(shape, Algorithm::ring, 0), {data.data(), nullptr}, mesh, options);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), ErrorCode::peer_lost) << status.to_string();
  EXPECT_NE(status.message().find("stopped sending in the middle of a frame for 300 ms"),
            std::string::npos)
      << status.message();
  EXPECT_GE(took, std::chrono::milliseconds(300));
  EXPECT_LT(took, std::chrono::seconds(5));  // the deadline is 20 s away
}

// A peer whose stream shows a frame of a later op while this op still expects its data skipped
// what this rank needs: the op fails at once, not at its deadline (20 s here), with its stream
// and every op after it wedged behind that frame.
TEST(Executor, AFrameOfAFarFutureOpFailsTheOpAtOnce) {
  auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
  const OpShape shape{Collective::allreduce, 2, 10, 4};
  FrameHeader frame = frame_of_op(1000, 40);
  frame.descriptor =
      options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1000, 256).descriptor;
  send_by_hand(rank1_socket, encode(frame));
  Bytes data(40);
  const auto start = net::Clock::now();
  const Status status =
      execute(build_schedule(shape, Algorithm::ring, 0), {data.data(), nullptr}, mesh,
              options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 256));
  EXPECT_EQ(status.code(), ErrorCode::mismatch) << status.to_string();
  EXPECT_NE(status.message().find("rank 1 has gone on to daemon op 1000 while this rank still "
                                  "expects data of this op from it"),
            std::string::npos)
      << status.message();
  EXPECT_LT(net::Clock::now() - start, std::chrono::seconds(5));
}

// A frame of a later op from a peer that this op receives nothing from is early, not wrong: the
// root of a broadcast finishes it while its peer's next frame waits unread.
TEST(Executor, AFrameOfALaterOpWaitsWhileThisOpNeedsNothingFromItsPeer) {
  auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
  const OpShape shape{Collective::broadcast, 2, 10, 4};
  send_by_hand(rank1_socket, encode(frame_of_op(2, 0)));
  Bytes data(40);
  const Status status =
      execute(build_schedule(shape, Algorithm::tree, 0), {data.data(), nullptr}, mesh,
              options_for(shape, Algorithm::tree, DataType::f32, ReduceOp::sum, 1, 256));
  EXPECT_TRUE(status.ok()) << status.to_string();
  ASSERT_TRUE(mesh.peer(1).header.has_value());
  EXPECT_EQ(mesh.peer(1).header->op.place, 2u);
}

// Rank 1, played by hand, is the root of a broadcast of 10 floats to rank 0, an op of job 5's
// stream 1 at place 1; `before` is sent ahead of the frame rank 0 needs, which follows if `data`.
struct KeyedBroadcast {
  static constexpr OpKey kOp{5, 1, 1};

  Status run(const std::vector<std::pair<FrameHeader, std::string>>& before, bool data,
             std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
    auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
    const OpShape shape{Collective::broadcast, 2, 10, 4, 1};
    ExecuteOptions options =
        options_for(shape, Algorithm::tree, DataType::f32, ReduceOp::sum, 0, 256);
    options.op = kOp;
    options.deadline = net::Deadline::after(deadline);
    for (const auto& [header, payload] : before) {
      send_by_hand(rank1_socket, encode(header));
      send_by_hand(rank1_socket, std::as_bytes(std::span(payload.data(), payload.size())));
    }
    const std::vector<float> sent(10, 7.0f);
    if (data) {
      FrameHeader frame = frame_of_op(0, 40);
      frame.op = kOp;
      frame.descriptor = options.descriptor;
      send_by_hand(rank1_socket, encode(frame));
      send_by_hand(rank1_socket, std::as_bytes(std::span(sent)));
    }
    received.assign(10, 0.0f);
    return execute(build_schedule(shape, Algorithm::tree, 0),
                   {reinterpret_cast<std::byte*>(received.data()), nullptr}, mesh, options);
  }

  static std::pair<FrameHeader, std::string> notice(FrameKind kind, OpKey op, std::string text) {
    FrameHeader header = frame_of_op(0, text.size());
    header.kind = kind;
    header.op = op;
    if (kind == FrameKind::abort) header.segment = static_cast<std::uint32_t>(ErrorCode::aborted);
    return {header, std::move(text)};
  }

  std::vector<float> received;
};

// Frames of another job, left in the channel by a job that ran here alone or ran elsewhere at the
// same time, are skipped: they neither fail the op nor pair with it. So are an abort of another
// job's op and an end of a stream whose client submitted past this op.
TEST(Executor, FramesOfAnotherJobAndEndsOfEarlierClientsAreSkipped) {
  KeyedBroadcast broadcast;
  FrameHeader foreign = frame_of_op(1, 40);
  foreign.op = {6, 1, 1};
  const Status status = broadcast.run(
      {{foreign, std::string(40, 'x')},
       KeyedBroadcast::notice(FrameKind::abort, {6, 1, 1}, "job 6 failed"),
       KeyedBroadcast::notice(FrameKind::end, {5, 1, 3}, "an earlier client left after op 3")},
      true);
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(broadcast.received, std::vector<float>(10, 7.0f));
}

// Without the op's own frame, the deadline names what the peer ran instead.
TEST(Executor, AnOpThatOnlyMetAnotherJobsFramesNamesThemAtItsDeadline) {
  KeyedBroadcast broadcast;
  FrameHeader foreign = frame_of_op(1, 40);
  foreign.op = {6, 1, 1};
  const Status status =
      broadcast.run({{foreign, std::string(40, 'x')}}, false, std::chrono::milliseconds(300));
  EXPECT_EQ(status.code(), ErrorCode::deadline_exceeded) << status.to_string();
  EXPECT_NE(status.message().find("rank 1 ran ops of another job meanwhile (op 1 of stream "
                                  "0000000000000001 of job 0000000000000006)"),
            std::string::npos)
      << status.message();
}

// The peer's client of this op's stream left before submitting this op: the op fails at once,
// with the peer's reason, instead of at its deadline (20 s here).
TEST(Executor, AnEndOfTheOpsStreamFailsTheOpAtOnce) {
  KeyedBroadcast broadcast;
  const auto start = net::Clock::now();
  const Status status = broadcast.run(
      {KeyedBroadcast::notice(FrameKind::end, {5, 1, 0}, "rank 1's client (pid 9) left")}, false);
  EXPECT_EQ(status.code(), ErrorCode::aborted) << status.to_string();
  EXPECT_EQ(status.message(), "rank 1: rank 1's client (pid 9) left");
  EXPECT_LT(net::Clock::now() - start, std::chrono::seconds(5));
}

// The peer's client submitted op 1 and left, and its end came while op 1 ran here: op 1 finishes,
// and op 2 of the stream, whose frames will never come, fails at once with the peer's reason.
TEST(Executor, AnEndReadDuringTheOpItsClientSubmittedFailsTheStreamsNextOpAtOnce) {
  auto [mesh, rank1_socket] = mesh_and_hand_played_peer();
  const OpShape shape{Collective::broadcast, 2, 10, 4, 1};
  ExecuteOptions options =
      options_for(shape, Algorithm::tree, DataType::f32, ReduceOp::sum, 0, 256);
  options.op = {5, 1, 1};
  const std::vector<float> sent(10, 7.0f);
  FrameHeader frame = frame_of_op(0, 40);
  frame.op = options.op;
  frame.descriptor = options.descriptor;
  const auto [end, reason] =
      KeyedBroadcast::notice(FrameKind::end, {5, 1, 1}, "rank 1's client (pid 9) left");
  // The end first: op 1 reads it while it still waits for its data.
  send_by_hand(rank1_socket, encode(end));
  send_by_hand(rank1_socket, std::as_bytes(std::span(reason.data(), reason.size())));
  send_by_hand(rank1_socket, encode(frame));
  send_by_hand(rank1_socket, std::as_bytes(std::span(sent)));
  std::vector<float> received(10, 0.0f);
  const Schedule schedule = build_schedule(shape, Algorithm::tree, 0);
  const OpBuffers buffers{reinterpret_cast<std::byte*>(received.data()), nullptr};
  ASSERT_TRUE(execute(schedule, buffers, mesh, options).ok());
  EXPECT_EQ(received, sent);
  options.op.place = 2;
  options.deadline = net::Deadline::after(std::chrono::seconds(20));
  const auto start = net::Clock::now();
  const Status status = execute(schedule, buffers, mesh, options);
  EXPECT_EQ(status.code(), ErrorCode::aborted) << status.to_string();
  EXPECT_EQ(status.message(), "rank 1: rank 1's client (pid 9) left");
  EXPECT_LT(net::Clock::now() - start, std::chrono::seconds(5));
}

TEST(Executor, AnEndWithAReasonOverTheLimitIsAProtocolError) {
  KeyedBroadcast broadcast;
  const Status status =
      broadcast.run({KeyedBroadcast::notice(FrameKind::end, {5, 1, 0},
                                            std::string(kMaxAbortReasonBytes + 1, 'r'))},
                    false);
  EXPECT_EQ(status.code(), ErrorCode::peer_lost) << status.to_string();
  EXPECT_NE(status.message().find("payload of 4097 bytes exceeds the limit of 4096"),
            std::string::npos)
      << status.message();
}

// Rank 1 has started more ops than rank 0 (a job ran some on it alone): once they share an op,
// rank 0 counts on from rank 1's count, so that a new algorithm table takes effect at the same op
// on both again.
TEST(Executor, ARankBehindInItsOpCountCatchesUpWithItsPeers) {
  auto meshes = connected_meshes(2);
  for (int skipped = 0; skipped < 9; ++skipped) meshes[1].next_op_id();
  const OpShape shape{Collective::allreduce, 2, 10, 4};
  on_every_rank(2, [&](int rank) {
    Bytes data(40);
    ExecuteOptions options =
        options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 256);
    options.op_count = meshes[rank].next_op_id();
    EXPECT_TRUE(execute(build_schedule(shape, Algorithm::ring, rank), {data.data(), nullptr},
                        meshes[rank], options)
                    .ok());
  });
  EXPECT_EQ(meshes[0].next_op_id(), 11u) << "rank 1's op was its 10th";
  EXPECT_EQ(meshes[1].next_op_id(), 11u);
}

TEST(Executor, ASilentPeerHitsTheDeadline) {
  auto meshes = connected_meshes(2);
  const OpShape shape{Collective::allreduce, 2, 10, 4};
  Bytes data(40);
  ExecuteOptions options =
      options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 256);
  options.deadline = net::Deadline::after(std::chrono::milliseconds(200));
  const auto start = net::Clock::now();
  const Status status = execute(build_schedule(shape, Algorithm::ring, 0), {data.data(), nullptr},
                                meshes[0], options);  // rank 1 never runs
  EXPECT_EQ(status.code(), ErrorCode::deadline_exceeded) << status.to_string();
  EXPECT_NE(status.message().find("waiting for rank 1"), std::string::npos) << status.message();
  EXPECT_LT(net::Clock::now() - start, std::chrono::seconds(2));
}

TEST(Executor, AnAbortSignalStopsTheOp) {
  auto meshes = connected_meshes(2);
  AbortSignal abort;
  abort.raise(Status(ErrorCode::peer_lost, "rank 1 was lost (reported by the coordinator)"));
  const OpShape shape{Collective::allreduce, 2, 10, 4};
  Bytes data(40);
  ExecuteOptions options =
      options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 256);
  options.interrupt = &abort;
  const Status status = execute(build_schedule(shape, Algorithm::ring, 0), {data.data(), nullptr},
                                meshes[0], options);
  EXPECT_EQ(status.message(), "rank 1 was lost (reported by the coordinator)");
}

// Values that no 16-bit type holds exactly, of both signs and of magnitudes from 2^-4 to 2^4.
std::vector<float> inexact_values(int rank, std::uint64_t count) {
  std::mt19937 generator(static_cast<unsigned>(rank * 7919 + count));
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-4, 4);
  std::vector<float> values(count);
  for (float& value : values) value = std::ldexp(mantissa(generator), exponent(generator));
  return values;
}

Bytes as_bytes(const std::vector<float>& values) {
  Bytes bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

float float_at(const Bytes& bytes, std::uint64_t index) {
  float value;
  std::memcpy(&value, bytes.data() + index * sizeof value, sizeof value);
  return value;
}

using WireCase = std::tuple<Collective, Algorithm, int, DataType>;

class ExecutorWireType : public ::testing::TestWithParam<WireCase> {};

// f32 values sent as bf16 or f16: every rank ends with the same bits, and each reduced element is
// within the documented bound of the exact sum (docs/clients.md, "Semantics"): at most p roundings
// to the wire type and p + 1 f32 roundings on the way, so |result - sum| <= ((1+u)^p
// (1+2^-24)^(p+1) - 1)
// * sum|x_r| (divided by p for avg). All-gather delivers every rank's block rounded once.
TEST_P(ExecutorWireType, EveryRankEndsWithTheSameBitsWithinTheBound) {
  const auto [collective, algorithm, p, wire] = GetParam();
  const double gamma = wire_error_bound(wire, DataType::f32, p);
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    for (const std::uint64_t n : {std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{4099}}) {
      SCOPED_TRACE(std::string(name(op)) + " n=" + std::to_string(n));
      auto meshes = connected_meshes(p);
      const OpShape shape{collective, p, n, sizeof(float)};
      std::vector<Bytes> results(p);
      std::vector<Span> result_spans(p);
      std::vector<Status> statuses(p);
      std::vector<std::vector<float>> inputs(p);
      for (int r = 0; r < p; ++r) inputs[r] = inexact_values(r, n);
      on_every_rank(p, [&](int r) {
        results[r] = as_bytes(inputs[r]);
        const Schedule schedule = build_schedule(shape, algorithm, r);
        result_spans[r] = schedule.result;
        ExecuteOptions options = options_for(shape, algorithm, DataType::f32, op, 1, 64);
        options.descriptor.wire = wire;
        statuses[r] = execute(schedule, {results[r].data(), nullptr}, meshes[r], options);
      });
      for (int r = 0; r < p; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r].to_string();
      for (int r = 0; r < p; ++r) {
        const std::uint64_t first = result_spans[r].offset / sizeof(float);
        const std::uint64_t last = result_spans[r].end() / sizeof(float);
        for (std::uint64_t i = first; i < last; ++i) {
          if (result_is_replicated(collective)) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(float_at(results[r], i)),
                      std::bit_cast<std::uint32_t>(float_at(results[0], i)))
                << "rank " << r << " element " << i;
          }
          if (collective == Collective::allgather) continue;
          double sum = 0;
          double magnitudes = 0;
          for (int q = 0; q < p; ++q) {
            const double x = inputs[q][i];
            sum += x;
            magnitudes += std::abs(x);
          }
          const double divisor = op == ReduceOp::avg ? p : 1;
          ASSERT_LE(std::abs(float_at(results[r], i) - sum / divisor), gamma * magnitudes / divisor)
              << "rank " << r << " element " << i;
        }
      }
      if (collective != Collective::allgather) continue;
      // Block q is rank q's values, rounded once to the wire type (unless there is no wire).
      for (int q = 0; q < p; ++q) {
        const Chunk block = balanced_chunk(n, p, q);
        std::vector<float> own = inputs[q];
        std::vector<std::byte> narrowed(own.size() * 2);
        if (p > 1) {
          narrow_for_wire(DataType::f32, wire, narrowed.data(),
                          reinterpret_cast<std::byte*>(own.data()), own.size());
        }
        for (std::uint64_t i = block.offset; i < block.end(); ++i) {
          ASSERT_EQ(float_at(results[0], i), own[i]) << "block " << q << " element " << i;
        }
      }
    }
  }
}

std::vector<WireCase> wire_cases() {
  std::vector<WireCase> cases;
  for (const Collective collective :
       {Collective::allreduce, Collective::reduce_scatter, Collective::allgather}) {
    for (const Algorithm algorithm : algorithms_for(collective)) {
      for (const int p : {1, 2, 3, 4, 5, 8}) {
        for (const DataType wire : {DataType::bf16, DataType::f16}) {
          cases.emplace_back(collective, algorithm, p, wire);
        }
      }
    }
  }
  return cases;
}

std::string wire_case_name(const ::testing::TestParamInfo<WireCase>& info) {
  const auto& [collective, algorithm, p, wire] = info.param;
  return std::string(name(collective)) + "_" + std::string(name(algorithm)) + "_p" +
         std::to_string(p) + "_" + std::string(name(wire));
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, ExecutorWireType, ::testing::ValuesIn(wire_cases()),
                         wire_case_name);

TEST(Executor, RanksThatDisagreeOnTheWireTypeFailNamingBoth) {
  const int p = 2;
  auto meshes = connected_meshes(p);
  const OpShape shape{Collective::allreduce, p, 100, sizeof(float)};
  std::vector<Status> statuses(p);
  on_every_rank(p, [&](int r) {
    Bytes data = as_bytes(inexact_values(r, 100));
    ExecuteOptions options =
        options_for(shape, Algorithm::ring, DataType::f32, ReduceOp::sum, 1, 1 << 20);
    if (r == 1) options.descriptor.wire = DataType::bf16;
    statuses[r] = execute(build_schedule(shape, Algorithm::ring, r), {data.data(), nullptr},
                          meshes[r], options);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(statuses[r].code(), ErrorCode::mismatch) << statuses[r].to_string();
  }
  EXPECT_NE(statuses[0].message().find("bf16 on the wire"), std::string::npos)
      << statuses[0].message();
}

TEST(WireType, OnlyF32AndF64SumsNarrowToSixteenBits) {
  EXPECT_TRUE(
      check_wire_type(Collective::allreduce, DataType::f32, ReduceOp::avg, DataType::bf16).ok());
  EXPECT_TRUE(
      check_wire_type(Collective::allgather, DataType::f64, ReduceOp::max, DataType::f16).ok());
  EXPECT_TRUE(
      check_wire_type(Collective::broadcast, DataType::i32, ReduceOp::sum, DataType::i32).ok());
  const auto refused = [](Collective collective, DataType type, ReduceOp op, DataType wire,
                          const std::string& why) {
    const Status status = check_wire_type(collective, type, op, wire);
    EXPECT_EQ(status.code(), ErrorCode::invalid_argument);
    EXPECT_NE(status.message().find(why), std::string::npos) << status.message();
  };
  refused(Collective::allreduce, DataType::i32, ReduceOp::sum, DataType::bf16, "only f32 and f64");
  refused(Collective::allreduce, DataType::f32, ReduceOp::max, DataType::bf16, "max is not a sum");
  refused(Collective::broadcast, DataType::f32, ReduceOp::sum, DataType::f16, "broadcast moves");
  refused(Collective::allreduce, DataType::f64, ReduceOp::sum, DataType::f32, "bf16 or f16");
}

// An f64 narrows as if directly, not through a float rounded to nearest: 1 + 2^-8 + 2^-30 lies
// above the bf16 tie 1 + 2^-8, but rounds to exactly that tie as a float.
TEST(WireType, AnF64NarrowsWithOneRounding) {
  double value = 1 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  std::uint16_t narrowed = 0;
  narrow_for_wire(DataType::f64, DataType::bf16, reinterpret_cast<std::byte*>(&narrowed),
                  reinterpret_cast<std::byte*>(&value), 1);
  EXPECT_EQ(value, 1 + std::ldexp(1.0, -7));
  EXPECT_EQ(narrowed, 0x3f81);
}

}  // namespace
}  // namespace gradsync::engine
