// The rows a collective's benchmark prints, in the columns of nccl-tests (docs/architecture.md
// §16), shared by `gradsync bench` and the peer benchmarks (bench/peers) so that their tables line
// up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collective/types.h"

namespace gradsync::cli {

struct BenchRow {
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
  std::string algorithm;
  double time_us = 0;        // the median op_spans()
  double algbw = 0;          // GB/s: bytes / time
  double busbw = 0;          // GB/s: algbw · bus_factor()
  double predicted_us = -1;  // negative: no model
  int wrong = 0;             // results that differ from the exact reference
  int iterations = 0;        // timed samples behind time_us
  // With a 16-bit wire: the largest error of one op on inexact values, as a fraction of the sum
  // of magnitudes (cli/wire_error.h); negative: not measured.
  double error = -1;
};

struct BenchSetup {
  std::string system = "gradsync";
  int world_size = 1;
  std::string dtype = "f32";
  std::string op = "sum";
  std::string wire;  // the values' 16-bit wire type, if they travel narrowed
  int iters = 0;
  int small_iters = 0;  // for rows of at most kSmallRowMaxBytes
  int warmup = 0;
  std::string note;         // one more header line, if any
  double error_bound = -1;  // with a wire type: what BenchRow::error may be (wire_error_bound)
  std::string collective = "allreduce";
};

// Rows up to this size take their own (larger) number of timed iterations: such an op lasts
// tens of microseconds, and the median of ten of them moves with every hiccup of a shared machine
// (rows near a ratio of 1 flipped between runs), while ten ops of 64 MiB already take seconds.
inline constexpr std::uint64_t kSmallRowMaxBytes = 64 << 10;

// The timed iterations of a row of `bytes`.
int timed_iterations(std::uint64_t bytes, int iters, int small_iters);

// What busbw is of algbw, as nccl-tests counts it: the bytes the busiest link carries in the
// bandwidth-optimal algorithm, over the op's size: 2(p − 1)/p for all-reduce, (p − 1)/p for the
// collectives that move each rank's part once (reduce-scatter, all-gather, all-to-all, gather,
// scatter), 1 for broadcast and reduce.
double bus_factor(Collective collective, int world_size);

// Now on the wall clock, in microseconds: the same in every process of a machine (and its network
// namespaces), and across machines as close as their clocks are kept, so that an op's time can
// run from the first rank's start to the last rank's end. A rank's own time misses what it did
// not wait for: a scatter's root is done once its bytes are in the kernel's buffers, and a
// receiver that leaves the barrier late starts its clock with the bytes already on the way.
double wall_clock_us();

// Per iteration, the op's time: from the earliest rank's start to the latest rank's end, given
// by rank as [rank][iteration].
std::vector<double> op_spans(const std::vector<std::vector<double>>& starts,
                             const std::vector<std::vector<double>>& stops);

// Fills algbw and busbw from bytes, time, the collective and the world size.
BenchRow make_row(std::uint64_t bytes, std::uint64_t count, std::string algorithm, double time_us,
                  int world_size, Collective collective = Collective::allreduce);
void print_bench_table(const BenchSetup& setup, const std::vector<BenchRow>& rows);
void write_bench_json(const std::string& path, const BenchSetup& setup,
                      const std::vector<BenchRow>& rows);
// The median of `values` (which it reorders); 0 for none.
double median(std::vector<double>& values);

}  // namespace gradsync::cli
