// A Schedule is one rank's part of a collective, as data (docs/architecture.md §3.1): a list of
// rounds, each naming what is sent to which peer and what is received from which peer into which
// byte range. Builders produce schedules; the engine executes them; the simulator and the cost
// model read them.
//
// Round semantics, which every executor must honour:
// 1. Sends read the buffers as they were when the round began.
// 2. Receives land after that: `recv_copy` overwrites, `recv_reduce` combines with what is there.
//    A receive may land on bytes the same round sends, at the offset of its message they are sent
//    from (a hypercube exchange; a Bruck hop): the engine then holds a received segment until the
//    segment of the send that reads its bytes is out, one segment per peer.
// 3. Local copies run last, after every transfer of the round.
// Messages between one ordered pair of ranks in one round match in the order they are listed.
// Every rank of an op has the same number of rounds (idle ranks have empty rounds), and zero-length
// transfers are listed like any other, so no rank waits for a message that nobody sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collective/partition.h"
#include "collective/types.h"

namespace gradsync {

// The buffers an op works on. `data` is the caller's tensor (reduced in place); `output` exists
// only where the result cannot overwrite the input (all-to-all); `scratch` belongs to the executor.
enum class BufferId : std::uint8_t { data, output, scratch };
inline constexpr int kBufferCount = 3;

std::string_view name(BufferId buffer);

struct Span {
  BufferId buffer = BufferId::data;
  std::uint64_t offset = 0;  // bytes
  std::uint64_t length = 0;  // bytes

  std::uint64_t end() const { return offset + length; }
  friend bool operator==(const Span&, const Span&) = default;
};

// Which operand stands on the left of the reduction. Ranks that reduce the same pair of partial
// results (a hypercube exchange) choose opposite orders so that both compute lower ⊕ higher and
// end with the same bits even where an operator is not bitwise commutative (signed zeros, NaNs).
enum class RecvAction : std::uint8_t {
  copy,                   // destination = received
  reduce_local_first,     // destination = destination ⊕ received
  reduce_received_first,  // destination = received ⊕ destination
};

struct Send {
  int peer = 0;
  std::vector<Span> spans;  // sent back to back as one message
  std::uint64_t bytes() const;
};

struct Recv {
  int peer = 0;
  std::vector<Span> spans;  // filled in order from one message
  RecvAction action = RecvAction::copy;
  std::uint64_t bytes() const;
  bool reduces() const { return action != RecvAction::copy; }
};

struct LocalCopy {
  Span from;
  Span to;
};

struct Round {
  std::vector<Send> sends;
  std::vector<Recv> recvs;
  std::vector<LocalCopy> copies;

  void send(int peer, Span span) { sends.push_back({peer, {span}}); }
  void recv_copy(int peer, Span span) { recvs.push_back({peer, {span}, RecvAction::copy}); }
  void recv_reduce(int peer, Span span, RecvAction order) {
    recvs.push_back({peer, {span}, order});
  }
  void copy(Span from, Span to) { copies.push_back({from, to}); }
  bool empty() const { return sends.empty() && recvs.empty() && copies.empty(); }
};

// What every rank of an op agrees on before any schedule is built.
struct OpShape {
  Collective collective = Collective::allreduce;
  int world_size = 1;
  // Elements of the tensor: the whole tensor for allreduce, reduce_scatter, allgather, broadcast,
  // reduce, gather and scatter (whose ranks each have one chunk of its balanced partition); the
  // elements sent to each destination for alltoall (the tensor is world_size blocks of that);
  // for alltoallv the most that one rank sends another, which is what the cost model reads;
  // unused for barrier.
  std::uint64_t count = 0;
  std::size_t element_size = 4;
  int root = 0;  // the collectives that have one (has_root())
  // alltoallv only: world_size² counts, row-major, splits[i · world_size + j] the elements rank i
  // sends rank j. Rank i's tensor is its row's blocks back to back, its output its column's.
  std::vector<std::uint64_t> splits = {};
};

struct Schedule {
  OpShape shape;
  Algorithm algorithm = Algorithm::ring;
  int rank = 0;
  std::uint64_t buffer_bytes[kBufferCount] = {};
  std::vector<Round> rounds;
  Span result;  // where this rank's result lives once every round has run

  std::uint64_t size_of(BufferId buffer) const { return buffer_bytes[static_cast<int>(buffer)]; }
  // Byte span of an element chunk of one buffer.
  Span span(Chunk chunk, BufferId buffer = BufferId::data) const;
  Round& add_round() { return rounds.emplace_back(); }
};

// Bytes of rank `rank`'s tensor and of its output buffer for an op of this shape.
std::uint64_t data_bytes(const OpShape& shape, int rank);
std::uint64_t output_bytes(const OpShape& shape, int rank);
// The same for the collectives whose sizes are every rank's (all but alltoallv).
std::uint64_t data_bytes(const OpShape& shape);
std::uint64_t output_bytes(const OpShape& shape);

// alltoallv: the elements rank `from` sends rank `to`.
std::uint64_t split(const OpShape& shape, int from, int to);
// alltoallv: the bytes of its splits, which lead the op's region (docs/architecture.md §5.4);
// 0 for every other collective.
std::uint64_t splits_bytes(const OpShape& shape);
// alltoallv: a tag of its splits (FNV-1a of their little-endian bytes), which every rank's op
// carries so that ranks whose splits differ fail with a mismatch.
std::uint64_t splits_digest(const OpShape& shape);
// alltoallv: an alltoallv shape of `splits` (world_size² counts, row-major: OpShape::splits).
OpShape alltoallv_shape(int world_size, std::vector<std::uint64_t> splits,
                        std::size_t element_size);

// A schedule whose buffers are sized for `shape` and that has no rounds yet.
Schedule empty_schedule(const OpShape& shape, Algorithm algorithm, int rank);

// True where every rank ends with the same bytes (allreduce, allgather, broadcast).
bool result_is_replicated(Collective collective);

}  // namespace gradsync
