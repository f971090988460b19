// One rank's op in `gradsync bench` and the peer benchmarks (bench/peers), for every collective
// the client has: the tensors it submits and whether it ended with the right result. A reduction's
// input is rank r's values (r + i) mod 4 in the bench's dtype, whose exact reduction is known in
// every dtype; a collective that moves data moves bytes that say whose they are and where they came
// from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "collective/schedule.h"
#include "collective/types.h"

namespace gradsync::cli {

// The count a bench op of `count` elements submits: all-to-all's is per block, a world size's
// share (at least 1); every other collective's is `count`.
std::uint64_t bench_op_count(Collective collective, int world_size, std::uint64_t count);

// An alltoallv bench op's split from rank `from` to rank `to`: uneven on purpose, in proportion to
// 1 + (from + to) mod world_size, so that each rank sends about `count` elements in all and every
// rank's longest block is twice its average.
std::uint64_t bench_alltoallv_split(int from, int to, int world_size, std::uint64_t count);

// The shape the cost model prices for a bench op of `count` elements over `world_size` ranks
// (alltoallv: with the splits above).
OpShape bench_op_shape(Collective collective, int world_size, std::uint64_t count,
                       std::size_t element_size, int root);

class BenchOp {
 public:
  // Rank `rank` of `world_size`, an op of `count` elements (all-to-all: `count` / world_size per
  // block, at least 1); `root` for the rooted collectives.
  BenchOp(Collective collective, DataType type, ReduceOp op, int root, int rank, int world_size,
          std::uint64_t count);

  Collective collective() const { return collective_; }
  DataType type() const { return type_; }
  // The op's count, as the client's call takes it.
  std::uint64_t count() const { return count_; }
  // The rank's buffer (in place, or the input) and its output buffer, in bytes.
  std::size_t data_bytes() const { return pristine_.size(); }
  std::size_t output_bytes() const { return output_bytes_; }
  // alltoallv: the elements this rank sends each rank and receives from each.
  const std::vector<std::uint64_t>& send_counts() const { return send_counts_; }
  const std::vector<std::uint64_t>& recv_counts() const { return recv_counts_; }
  // Refills `data` with the rank's input and overwrites `output`, as every op starts: a result
  // the op did not deliver must not pass for the last op's.
  void refill(std::byte* data, std::byte* output) const;
  // Whether the op left the result it must in `data` and `output`.
  bool right(const std::byte* data, const std::byte* output) const;

 private:
  Collective collective_;
  DataType type_;
  std::uint64_t count_;
  std::size_t output_bytes_ = 0;
  std::vector<std::byte> pristine_;
  std::vector<std::byte> expected_;  // empty: nothing to check on this rank
  std::vector<std::uint64_t> send_counts_;
  std::vector<std::uint64_t> recv_counts_;
  bool expected_in_output_ = false;
};

}  // namespace gradsync::cli
