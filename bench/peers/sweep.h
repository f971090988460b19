// What every peer benchmark (Open MPI, Gloo) shares with `gradsync bench`: the command line of
// the size sweep, the rank-derived input whose exact sum is known, and the timing of one row.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gradsync::peers {

struct SweepOptions {
  std::uint64_t min_bytes = 4;
  std::uint64_t max_bytes = 64ull << 20;
  double step_factor = 4;
  int iters = 20;
  int small_iters = 0;  // rows of at most 64 KiB (cli::kSmallRowMaxBytes); 0: as many as iters
  int warmup = 5;
  std::string json_path;
  std::string algorithm;                 // the program's own choice, where it has several
  std::string collective = "allreduce";  // where the program has several
  int root = 0;
};

// --min-bytes --max-bytes --step-factor --iters --small-iters --warmup --json --algorithm
// --collective --root; exits with a message on anything else.
SweepOptions parse_sweep(int argc, char** argv, const std::string& program);

// f32 element counts of the sweep, as gradsync bench makes them.
std::vector<std::uint64_t> sweep_counts(const SweepOptions& options);

struct RankTimes {
  // One per timed iteration: when its op began and ended (cli::wall_clock_us).
  std::vector<double> starts_us;
  std::vector<double> stops_us;
  int wrong = 0;  // iterations whose result was not the exact sum
};

// What a program reduces with MAX over its ranks to learn each iteration's op time (from the
// earliest start to the latest end): the stops, the starts negated, then the wrong count.
std::vector<double> span_reduction_input(const RankTimes& times);
// The op times and the wrong count, from that reduction's output.
std::vector<double> spans_of_reduction(const std::vector<double>& reduced, int& wrong);

// Runs warmup + timed in-place sums of `count` floats through `allreduce`, refilling the input
// (element i of rank r is (r + i) mod 4) and passing `barrier` before each (so that a row times
// the op, not the ranks arriving at different times, as gradsync bench does), and checking each
// result.
RankTimes time_iterations(std::uint64_t count, int rank, int world_size,
                          const SweepOptions& options,
                          const std::function<void(float*, std::uint64_t)>& allreduce,
                          const std::function<void()>& barrier);

}  // namespace gradsync::peers
