// The benchmark rows' arithmetic (cli/bench_report.h): an op's time runs from the first rank's
// start to the last rank's end, and busbw takes nccl-tests' factor for each collective.
#include "cli/bench_report.h"

#include <gtest/gtest.h>

namespace gradsync::cli {
namespace {

TEST(BenchReport, AnOpsTimeRunsFromTheFirstStartToTheLastEnd) {
  // Rank 0 (a scatter's root) is done at once; rank 1 starts late and ends last.
  const std::vector<std::vector<double>> starts = {{100, 1000}, {140, 1002}};
  const std::vector<std::vector<double>> stops = {{110, 1003}, {190, 1010}};
  EXPECT_EQ(op_spans(starts, stops), (std::vector<double>{90, 10}));
  EXPECT_TRUE(op_spans({}, {}).empty());
}

TEST(BenchReport, BusbwTakesTheCollectivesFactor) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::allreduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::broadcast, 4), 1);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::reduce, 4), 1);
  for (const Collective collective :
       {Collective::reduce_scatter, Collective::allgather, Collective::alltoall, Collective::gather,
        Collective::scatter}) {
    EXPECT_DOUBLE_EQ(bus_factor(collective, 4), 0.75) << name(collective);
  }
  const BenchRow row = make_row(4000, 1000, "ring", 2, 4, Collective::gather);
  EXPECT_DOUBLE_EQ(row.algbw, 2);
  EXPECT_DOUBLE_EQ(row.busbw, 1.5);
}

}  // namespace
}  // namespace gradsync::cli
