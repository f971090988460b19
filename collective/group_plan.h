// What the coordinator publishes to every rank of a generation (docs/architecture.md §9): the
// network as the workers measured it, and the algorithm table built from that. Every rank holds the
// same plan, so every rank picks the same algorithm for the same op; clients can ask for it to show
// the choice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collective/algorithm_table.h"
#include "collective/calibration.h"
#include "collective/cost_model.h"
#include "collective/host_layout.h"

namespace gradsync {

// No group is larger (gradsyncd coordinator --world-size).
inline constexpr int kMaxWorldSize = 1024;
// A trial runs at least one op in this many; a plan keeps at most this many table changes.
inline constexpr int kMaxTrialEvery = 1'000'000;
inline constexpr int kMaxTableHistory = 64;

// An exploration of the refined table: one all-reduce in `every` of 2^size_log2 up to
// 2^(size_log2 + 1) bytes runs `algorithm` (plan_choice.h picks which, by the op's id).
struct TableTrial {
  int size_log2 = 0;
  Algorithm algorithm = Algorithm::ring;
  int every = 0;
  friend bool operator==(const TableTrial&, const TableTrial&) = default;
};

// A change of the table refined from real ops: version `version` from op `from_op` on.
struct TableChange {
  std::uint64_t version = 0;
  std::uint64_t from_op = 0;
  std::string why;
  friend bool operator==(const TableChange&, const TableChange&) = default;
};

struct GroupPlan {
  std::uint64_t generation = 0;
  int world_size = 0;
  // True when the workers probed their links; false when the model came from the coordinator's
  // --alpha-us and --beta-us-per-byte.
  bool measured = false;
  NetworkModel network;                        // network.gamma_us_per_byte is the slowest rank's
  std::vector<double> gamma_us_per_byte;       // by rank, as measured (the model takes the max)
  double probe_ms = 0;                         // how long the slowest rank's probing took
  std::vector<CalibrationSample> calibration;  // all-reduce, by algorithm and size
  double calibration_ms = 0;                   // how long the slowest rank's calibration took
  AlgorithmTable table;
  std::uint64_t table_version = 1;  // one more for every change refined from real ops
  std::vector<TableTrial> trials;
  std::vector<TableChange> history;  // oldest first
  // By host (world_size counts hosts, and the table is for ops between them): the ranks each
  // host's daemon serves; empty: one each.
  std::vector<int> local_ranks;

  friend bool operator==(const GroupPlan&, const GroupPlan&) = default;
};

// The group's hosts and their local ranks.
HostLayout host_layout(const GroupPlan& plan);

// The plan's predicted time of an op: the model's, calibrated for all-reduce (calibration.h).
double predicted_us(const GroupPlan& plan, const OpShape& shape, Algorithm algorithm);

// For the logs: the range of α and β over the links, γ, and the table, one threshold a line.
std::string describe(const GroupPlan& plan);

}  // namespace gradsync
