#include "daemon/table_refiner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "collective/algorithms.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

// Trials run only for algorithms predicted within this factor of the table's choice.
constexpr double kContenderFactor = 1.10;
// An algorithm predicted faster than the table's choice is tried this many times as often.
constexpr int kSuspectedFasterFactor = 5;
// The largest bucket: 2^62 bytes.
constexpr int kMaxSizeLog2 = 62;

std::string times_text(Algorithm algorithm, double median_us, double low_us, double high_us,
                       std::uint64_t ops) {
  char text[160];
  std::snprintf(text, sizeof text, "%s %.0f us (quartiles %.0f-%.0f, %llu ops)",
                std::string(name(algorithm)).c_str(), median_us, low_us, high_us,
                static_cast<unsigned long long>(ops));
  return text;
}

}  // namespace

TableRefiner::TableRefiner(GroupPlan plan, int explore_every)
    : plan_(std::move(plan)),
      explore_every_(explore_every),
      reported_(static_cast<std::size_t>(plan_.world_size)) {}

Status TableRefiner::take(int rank, const proto::OpTimesReport& report) {
  const auto bad = [rank](const std::string& what) {
    return Status(ErrorCode::protocol_error,
                  "rank " + std::to_string(rank) + " sent bad op times: " + what);
  };
  if (report.generation() != plan_.generation) {
    return bad("they are of generation " + std::to_string(report.generation()));
  }
  std::map<std::pair<int, Algorithm>, Times> latest;
  for (const proto::OpTimes& times : report.times()) {
    const auto algorithm = from_proto(times.algorithm());
    if (!algorithm || !supports(Collective::allreduce, *algorithm) ||
        times.size_log2() > kMaxSizeLog2) {
      return bad("a bucket of 2^" + std::to_string(times.size_log2()) +
                 " bytes or an algorithm that is not an all-reduce's");
    }
    const auto finite = [](double value) { return std::isfinite(value) && value > 0; };
    if (!finite(times.low_us()) || !finite(times.median_us()) || !finite(times.high_us()) ||
        times.low_us() > times.median_us() || times.median_us() > times.high_us() ||
        times.ops() == 0) {
      return bad("quartiles that are not times > 0 in order, or of no ops");
    }
    const std::pair key{static_cast<int>(times.size_log2()), *algorithm};
    if (!latest.emplace(key, Times{times.low_us(), times.median_us(), times.high_us(), times.ops()})
             .second) {
      return bad("a bucket and algorithm listed twice");
    }
  }
  for (auto& [key, times] : latest) reported_[rank][key] = times;
  return {};
}

std::optional<TableRefiner::Times> TableRefiner::group_times(int size_log2,
                                                             Algorithm algorithm) const {
  Times group;
  for (const auto& rank : reported_) {
    const auto found = rank.find({size_log2, algorithm});
    if (found == rank.end() || found->second.ops < static_cast<std::uint64_t>(kMinOps)) {
      return std::nullopt;
    }
    group.low_us = std::max(group.low_us, found->second.low_us);
    group.median_us = std::max(group.median_us, found->second.median_us);
    group.high_us = std::max(group.high_us, found->second.high_us);
    group.ops = std::max(group.ops, found->second.ops);
  }
  return group;
}

double TableRefiner::predicted(int size_log2, Algorithm algorithm) const {
  const auto [entry, added] = predictions_.emplace(std::pair{size_log2, algorithm}, 0.0);
  if (added) {
    const OpShape shape{Collective::allreduce, plan_.world_size,
                        std::max<std::uint64_t>((1ull << size_log2) / 4, 1), 4};
    entry->second = predicted_us(plan_, shape, algorithm);
  }
  return entry->second;
}

std::optional<GroupPlan> TableRefiner::next() const {
  std::set<int> buckets;
  for (const auto& rank : reported_) {
    for (const auto& [key, times] : rank) buckets.insert(key.first);
  }
  GroupPlan next = plan_;
  next.trials.clear();
  std::string why;
  for (const int bucket : buckets) {
    const std::uint64_t bytes = 1ull << bucket;
    const Algorithm running = plan_.table.lookup(Collective::allreduce, bytes);
    const std::optional<Times> current = group_times(bucket, running);
    if (!current) continue;
    Algorithm chosen = running;
    std::optional<Times> best;
    for (const Algorithm other : algorithms_for(Collective::allreduce)) {
      const std::optional<Times> times = group_times(bucket, other);
      if (other == running || !times || times->high_us >= current->low_us) continue;
      if (!best || times->median_us < best->median_us) {
        best = times;
        chosen = other;
      }
    }
    if (best) {
      next.table = next.table.with(Collective::allreduce, bytes, bytes * 2, chosen);
      why +=
          (why.empty() ? "" : "; ") + std::string("all-reduce of 2^") + std::to_string(bucket) +
          " B: " + times_text(chosen, best->median_us, best->low_us, best->high_us, best->ops) +
          " in real ops, clear of " +
          times_text(running, current->median_us, current->low_us, current->high_us, current->ops);
    }
    if (explore_every_ == 0) continue;
    // Trials of the close contenders of what the bucket runs now, not timed enough yet: predicted
    // within 10% of its prediction or of its real time, whichever is longer (a prediction can be
    // wrong: on the emulated LAN, p = 4, calibration put the hypercube at 444 us for 64 KiB,
    // where client ops took 812, and halving-doubling at 808, where they took 483).
    const double chosen_us = predicted(bucket, chosen);
    const double reference_us = std::max(chosen_us, (best ? best : current)->median_us);
    for (const Algorithm other : algorithms_for(Collective::allreduce)) {
      if (other == chosen || group_times(bucket, other)) continue;
      const double other_us = predicted(bucket, other);
      // A trial runs until its algorithm is timed: one that noise in the reference took out and
      // put back would cost a table version each time.
      const bool trying =
          std::any_of(plan_.trials.begin(), plan_.trials.end(), [&](const TableTrial& trial) {
            return trial.size_log2 == bucket && trial.algorithm == other;
          });
      if (!trying && other_us > kContenderFactor * reference_us) continue;
      const int every = other_us < chosen_us ? std::max(2, explore_every_ / kSuspectedFasterFactor)
                                             : std::max(2, explore_every_);
      next.trials.push_back({bucket, other, every});
    }
  }
  if (next.table == plan_.table && next.trials == plan_.trials) return std::nullopt;
  if (why.empty()) {
    why = "trials:";
    for (const TableTrial& trial : next.trials) {
      why += " " + std::string(name(trial.algorithm)) + " at 2^" + std::to_string(trial.size_log2) +
             " B (1 op in " + std::to_string(trial.every) + ")";
    }
    if (next.trials.empty()) why += " none";
  }
  next.table_version = plan_.table_version + 1;
  next.history.push_back({next.table_version, 0, why});
  if (next.history.size() > static_cast<std::size_t>(kMaxTableHistory)) {
    next.history.erase(next.history.begin());
  }
  return next;
}

}  // namespace gradsync::daemon
