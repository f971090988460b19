#include "cli/bench_op.h"

#include <algorithm>
#include <cstring>

#include "collective/partition.h"
#include "collective/reduce_kernels.h"

namespace gradsync::cli {

namespace {

template <typename T>
std::vector<std::byte> bytes_of(T bits) {
  std::vector<std::byte> bytes(sizeof(T));
  std::memcpy(bytes.data(), &bits, sizeof(T));
  return bytes;
}

// The integer k in `type`, built with the kernels (k ones summed), so that every dtype works
// without a conversion table.
std::vector<std::byte> small_integer(DataType type, int k) {
  std::vector<std::byte> one(element_size(type));
  // 1 is 1 in every integer type and bool; for floats build it from its bits (complex: its real
  // part).
  switch (type) {
    case DataType::f32:
    case DataType::c64:
      std::memcpy(one.data(), bytes_of<std::uint32_t>(0x3f800000u).data(), 4);
      break;
    case DataType::f64:
    case DataType::c128:
      std::memcpy(one.data(), bytes_of<std::uint64_t>(0x3ff0000000000000ull).data(), 8);
      break;
    case DataType::f16:
      one = bytes_of<std::uint16_t>(0x3c00);
      break;
    case DataType::bf16:
      one = bytes_of<std::uint16_t>(0x3f80);
      break;
    default:
      one[0] = std::byte{1};
      break;
  }
  std::vector<std::byte> value(one.size());
  for (int i = 0; i < k; ++i)
    reduce(type, ReduceOp::sum, value.data(), value.data(), one.data(), 1);
  return value;
}

// Rank r's values of a reduction: element i is (r + i) mod 4.
std::vector<std::byte> reduction_input(DataType type, int rank, std::uint64_t count) {
  const std::size_t size = element_size(type);
  std::vector<std::byte> data(count * size);
  const std::vector<std::byte> values[4] = {small_integer(type, 0), small_integer(type, 1),
                                            small_integer(type, 2), small_integer(type, 3)};
  for (std::uint64_t i = 0; i < count; ++i) {
    const auto& value = values[(static_cast<std::uint64_t>(rank) + i) % 4];
    std::memcpy(data.data() + i * size, value.data(), size);
  }
  return data;
}

// Every rank's reduction_input() reduced in rank order, then finalized as the daemons do.
std::vector<std::byte> reduction(DataType type, ReduceOp op, int world_size, std::uint64_t count) {
  std::vector<std::byte> result = reduction_input(type, 0, count);
  for (int r = 1; r < world_size; ++r) {
    const std::vector<std::byte> next = reduction_input(type, r, count);
    reduce(type, op, result.data(), result.data(), next.data(), count);
  }
  finalize_average(type, op, result.data(), count, world_size);
  return result;
}

// Bytes that say whose they are: byte k of `owner`'s `bytes`.
std::vector<std::byte> owned_bytes(int owner, std::uint64_t bytes) {
  std::vector<std::byte> data(bytes);
  for (std::uint64_t k = 0; k < bytes; ++k) {
    data[k] = static_cast<std::byte>((static_cast<std::uint64_t>(owner) * 131 + k * 7 + k / 251));
  }
  return data;
}

// Elements `chunk` of `tensor`.
std::vector<std::byte> slice(const std::vector<std::byte>& tensor, Chunk chunk, std::size_t size) {
  return {tensor.begin() + static_cast<std::ptrdiff_t>(chunk.offset * size),
          tensor.begin() + static_cast<std::ptrdiff_t>((chunk.offset + chunk.count) * size)};
}

}  // namespace

std::uint64_t bench_op_count(Collective collective, int world_size, std::uint64_t count) {
  if (collective != Collective::alltoall) return count;
  return std::max<std::uint64_t>(count / static_cast<std::uint64_t>(world_size), 1);
}

std::uint64_t bench_alltoallv_split(int from, int to, int world_size, std::uint64_t count) {
  const auto p = static_cast<std::uint64_t>(world_size);
  const auto weight = 1 + static_cast<std::uint64_t>((from + to) % world_size);
  return count * 2 * weight / (p * (p + 1));
}

OpShape bench_op_shape(Collective collective, int world_size, std::uint64_t count,
                       std::size_t element_size, int root) {
  if (collective != Collective::alltoallv) {
    return {collective, world_size, bench_op_count(collective, world_size, count), element_size,
            root};
  }
  std::vector<std::uint64_t> splits;
  for (int from = 0; from < world_size; ++from) {
    for (int to = 0; to < world_size; ++to) {
      splits.push_back(bench_alltoallv_split(from, to, world_size, count));
    }
  }
  return alltoallv_shape(world_size, std::move(splits), element_size);
}

BenchOp::BenchOp(Collective collective, DataType type, ReduceOp op, int root, int rank,
                 int world_size, std::uint64_t count)
    : collective_(collective), type_(type), count_(count) {
  const std::size_t size = element_size(type);
  const Chunk mine = balanced_chunk(count, world_size, rank);
  // A tensor of the whole op, every rank's chunk its own bytes: what all-gather and gather
  // assemble and scatter hands out.
  const auto whole = [&] {
    std::vector<std::byte> tensor;
    for (int owner = 0; owner < world_size; ++owner) {
      const std::vector<std::byte> chunk =
          owned_bytes(owner, balanced_chunk(count, world_size, owner).count * size);
      tensor.insert(tensor.end(), chunk.begin(), chunk.end());
    }
    return tensor;
  };
  switch (collective) {
    case Collective::allreduce:
      pristine_ = reduction_input(type, rank, count);
      expected_ = reduction(type, op, world_size, count);
      break;
    case Collective::reduce:
      pristine_ = reduction_input(type, rank, count);
      expected_ = rank == root ? reduction(type, op, world_size, count) : pristine_;
      break;
    case Collective::reduce_scatter:
      pristine_ = reduction_input(type, rank, count);
      expected_ = slice(reduction(type, op, world_size, count), mine, size);
      expected_in_output_ = true;
      break;
    case Collective::allgather:
    case Collective::gather:
      pristine_ = slice(whole(), mine, size);
      if (collective == Collective::allgather || rank == root) expected_ = whole();
      expected_in_output_ = true;
      output_bytes_ = count * size;
      break;
    case Collective::scatter:
      if (rank == root) pristine_ = whole();
      expected_ = slice(whole(), mine, size);
      expected_in_output_ = true;
      break;
    case Collective::broadcast:
      pristine_ = owned_bytes(rank, count * size);
      expected_ = owned_bytes(root, count * size);
      break;
    case Collective::alltoall: {
      count_ = bench_op_count(collective, world_size, count);
      const std::size_t block = count_ * size;
      for (int to = 0; to < world_size; ++to) {
        const std::vector<std::byte> mine_to = owned_bytes(rank * world_size + to, block);
        pristine_.insert(pristine_.end(), mine_to.begin(), mine_to.end());
        const std::vector<std::byte> theirs = owned_bytes(to * world_size + rank, block);
        expected_.insert(expected_.end(), theirs.begin(), theirs.end());
      }
      expected_in_output_ = true;
      break;
    }
    case Collective::alltoallv:
      for (int peer = 0; peer < world_size; ++peer) {
        send_counts_.push_back(bench_alltoallv_split(rank, peer, world_size, count));
        recv_counts_.push_back(bench_alltoallv_split(peer, rank, world_size, count));
        const std::vector<std::byte> mine_to =
            owned_bytes(rank * world_size + peer, send_counts_.back() * size);
        pristine_.insert(pristine_.end(), mine_to.begin(), mine_to.end());
        const std::vector<std::byte> theirs =
            owned_bytes(peer * world_size + rank, recv_counts_.back() * size);
        expected_.insert(expected_.end(), theirs.begin(), theirs.end());
      }
      expected_in_output_ = true;
      break;
    case Collective::barrier:
      break;
  }
  if (expected_in_output_ && output_bytes_ == 0) output_bytes_ = expected_.size();
  if (collective == Collective::scatter) output_bytes_ = mine.count * size;
}

void BenchOp::refill(std::byte* data, std::byte* output) const {
  if (!pristine_.empty()) std::memcpy(data, pristine_.data(), pristine_.size());
  if (output_bytes_ > 0) std::memset(output, 0xa5, output_bytes_);
}

bool BenchOp::right(const std::byte* data, const std::byte* output) const {
  if (expected_.empty()) return true;
  // memcmp: std::equal on std::byte compiles to a byte loop, which took 18% of all CPU in a
  // 1 MiB run, stolen from ranks still inside their op.
  return std::memcmp(expected_in_output_ ? output : data, expected_.data(), expected_.size()) == 0;
}

}  // namespace gradsync::cli
