// The coordinator's refinement of a generation's algorithm table from real ops
// (docs/architecture.md §9), as pure logic: the workers' op times in, the next table version out.
//
// Every worker reports the quartiles of the last all-reduce ops auto ran, per size bucket
// (2^k up to 2^(k+1) bytes) and algorithm. Once every rank has timed enough of a bucket's
// algorithm, the group's view of it is the largest of the ranks' quartiles (an op lasts until its
// slowest rank is done). A bucket switches to another algorithm when that one's upper quartile
// lies below the lower quartile of the algorithm the table runs there: the rule a calibration
// follows (collective/plan_choice.h), so that noise cannot flip a table either way. Real times of
// an alternative come from trials: an algorithm the plan predicts within 10% of the table's
// choice, by its prediction or by its real time, runs one op in `explore_every` of the bucket (five
// times as often where it is predicted faster than the choice, where a trial costs nothing
// expected) until every rank has timed enough of it.
#pragma once

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "collective/group_plan.h"
#include "collective/status.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

class TableRefiner {
 public:
  // A bucket's algorithm counts once every rank has timed this many of its ops.
  static constexpr int kMinOps = 8;

  // Refines `plan`'s table; `explore_every` 0: no trials (the table changes only on real times
  // that ops forced to an algorithm do not give).
  TableRefiner(GroupPlan plan, int explore_every);

  // Rank `rank`'s latest times, checked: its generation, buckets and algorithms that exist,
  // quartiles in order.
  Status take(int rank, const proto::OpTimesReport& report);
  // The next version of the plan (table, trials and a history entry whose from_op is still 0) when
  // the evidence changes the table or its trials; nullopt otherwise.
  std::optional<GroupPlan> next() const;
  // `plan`, from next() with its history's from_op set, runs now.
  void switched(GroupPlan plan) { plan_ = std::move(plan); }
  const GroupPlan& plan() const { return plan_; }

 private:
  struct Times {
    double low_us = 0;
    double median_us = 0;
    double high_us = 0;
    std::uint64_t ops = 0;
  };
  // The slowest rank's quartiles of bucket `size_log2`'s `algorithm`, once every rank has
  // reported at least kMinOps of them.
  std::optional<Times> group_times(int size_log2, Algorithm algorithm) const;
  // The plan's prediction for bucket `size_log2`'s all-reduce with `algorithm`, computed once: at
  // p = 1024 a prediction builds a thousand schedules, and next() runs at every report.
  double predicted(int size_log2, Algorithm algorithm) const;

  GroupPlan plan_;
  const int explore_every_;
  // By rank: (size_log2, algorithm) -> the latest times.
  std::vector<std::map<std::pair<int, Algorithm>, Times>> reported_;
  mutable std::map<std::pair<int, Algorithm>, double> predictions_;
};

}  // namespace gradsync::daemon
