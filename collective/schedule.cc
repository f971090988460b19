#include "collective/schedule.h"

#include <cstdlib>
#include <numeric>

#include "collective/check.h"

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

std::uint64_t data_bytes(const OpShape& shape) {
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
  schedule.buffer_bytes[static_cast<int>(BufferId::data)] = data_bytes(shape);
  schedule.buffer_bytes[static_cast<int>(BufferId::output)] = output_bytes(shape);
  const BufferId result_buffer =
      shape.collective == Collective::alltoall ? BufferId::output : BufferId::data;
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
