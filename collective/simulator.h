// An in-memory simulator: runs the schedules of all p ranks of one op together on real bytes, round
// by round, and fails loudly on anything an executor would trip over: a receive that no send
// matches, lengths that differ, a span outside its buffer, ranks that end with different results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collective/schedule.h"
#include "collective/status.h"
#include "collective/types.h"

namespace gradsync {

struct RankBuffers {
  std::vector<std::byte> data;  // the rank's tensor on entry; its result on exit (most collectives)
  std::vector<std::byte> output;  // all-to-all only
};

struct RankTraffic {
  std::uint64_t messages_sent = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t bytes_received = 0;
};

struct SimulationReport {
  Status status;
  std::vector<RankTraffic> traffic;  // per rank
};

// `schedules[r]` is rank r's schedule and `buffers[r]` its buffers, sized for the op's shape.
// Reductions use `type` and `op`; ReduceOp::avg is scaled once at the end, as an executor would.
SimulationReport simulate(std::span<const Schedule> schedules, std::span<RankBuffers> buffers,
                          DataType type, ReduceOp op);

}  // namespace gradsync
