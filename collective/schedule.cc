#include "collective/schedule.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <numeric>

#include "collective/check.h"
#include "collective/math_util.h"

namespace gradsync {

namespace {

std::uint64_t total_length(const std::vector<Span>& spans) {
  return std::accumulate(spans.begin(), spans.end(), std::uint64_t{0},
                         [](std::uint64_t sum, const Span& span) { return sum + span.length; });
}

}  // namespace

std::string_view name(BufferId buffer) {
  switch (buffer) {
    case BufferId::data:
      return "data";
    case BufferId::output:
      return "output";
    case BufferId::scratch:
      return "scratch";
  }
  std::abort();
}

std::uint64_t Send::bytes() const { return total_length(spans); }
std::uint64_t Recv::bytes() const { return total_length(spans); }

Span Schedule::span(Chunk chunk, BufferId buffer) const {
  return Span{buffer, chunk.offset * shape.element_size, chunk.count * shape.element_size};
}

std::uint64_t split(const OpShape& shape, int from, int to) {
  GRADSYNC_CHECK_EQ(shape.splits.size(), static_cast<std::size_t>(shape.world_size) *
                                             static_cast<std::size_t>(shape.world_size));
  return shape.splits[static_cast<std::size_t>(from) * static_cast<std::size_t>(shape.world_size) +
                      static_cast<std::size_t>(to)];
}

std::uint64_t splits_bytes(const OpShape& shape) {
  return shape.collective == Collective::alltoallv
             ? static_cast<std::uint64_t>(shape.world_size) *
                   static_cast<std::uint64_t>(shape.world_size) * sizeof(std::uint64_t)
             : 0;
}

std::uint64_t splits_digest(const OpShape& shape) {
  static_assert(std::endian::native == std::endian::little, "the digest is of little-endian bytes");
  return fnv1a(shape.splits.data(), shape.splits.size() * sizeof(std::uint64_t));
}

OpShape alltoallv_shape(int world_size, std::vector<std::uint64_t> splits,
                        std::size_t element_size) {
  const std::uint64_t most = splits.empty() ? 0 : *std::max_element(splits.begin(), splits.end());
  return {Collective::alltoallv, world_size, most, element_size, 0, std::move(splits)};
}

std::uint64_t data_bytes(const OpShape& shape, int rank) {
  if (shape.collective != Collective::alltoallv) return data_bytes(shape);
  std::uint64_t elements = 0;
  for (int to = 0; to < shape.world_size; ++to) elements += split(shape, rank, to);
  return elements * shape.element_size;
}

std::uint64_t output_bytes(const OpShape& shape, int rank) {
  if (shape.collective != Collective::alltoallv) return output_bytes(shape);
  std::uint64_t elements = 0;
  for (int from = 0; from < shape.world_size; ++from) elements += split(shape, from, rank);
  return elements * shape.element_size;
}

std::uint64_t data_bytes(const OpShape& shape) {
  GRADSYNC_CHECK(shape.collective != Collective::alltoallv);
  switch (shape.collective) {
    case Collective::alltoall:
      return static_cast<std::uint64_t>(shape.world_size) * shape.count * shape.element_size;
    case Collective::barrier:
      return 0;
    default:
      return shape.count * shape.element_size;
  }
}

std::uint64_t output_bytes(const OpShape& shape) {
  GRADSYNC_CHECK(shape.collective != Collective::alltoallv);
  return shape.collective == Collective::alltoall ? data_bytes(shape) : 0;
}

Schedule empty_schedule(const OpShape& shape, Algorithm algorithm, int rank) {
  GRADSYNC_CHECK_GE(shape.world_size, 1);
  GRADSYNC_CHECK_GE(rank, 0);
  GRADSYNC_CHECK_LT(rank, shape.world_size);
  GRADSYNC_CHECK_GT(shape.element_size, 0u);
  Schedule schedule;
  schedule.shape = shape;
  schedule.algorithm = algorithm;
  schedule.rank = rank;
  schedule.buffer_bytes[static_cast<int>(BufferId::data)] = data_bytes(shape, rank);
  schedule.buffer_bytes[static_cast<int>(BufferId::output)] = output_bytes(shape, rank);
  const BufferId result_buffer =
      shape.collective == Collective::alltoall || shape.collective == Collective::alltoallv
          ? BufferId::output
          : BufferId::data;
  schedule.result = Span{result_buffer, 0, schedule.size_of(result_buffer)};
  switch (shape.collective) {
    case Collective::reduce:
    case Collective::gather:
      if (rank != shape.root) schedule.result.length = 0;  // the result is the root's alone
      break;
    case Collective::scatter:
      schedule.result = schedule.span(balanced_chunk(shape.count, shape.world_size, rank));
      break;
    default:
      break;
  }
  return schedule;
}

bool result_is_replicated(Collective collective) {
  return collective == Collective::allreduce || collective == Collective::allgather ||
         collective == Collective::broadcast;
}

}  // namespace gradsync
