// The times of the all-reduce ops auto ran on this worker, per size bucket and algorithm: what the
// coordinator refines the table from (daemon/table_refiner.h). The op thread records; the control
// thread sends what changed at every heartbeat.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "collective/types.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

class OpTimes {
 public:
  // The quartiles are of this many latest ops per bucket and algorithm: recent enough to follow
  // the host, enough to have quartiles.
  static constexpr std::size_t kWindow = 32;

  // Ops recorded since the last report that make one due before the next heartbeat: a training
  // loop runs hundreds of ops a second.
  static constexpr std::uint64_t kReportEvery = 16;

  // An op of `wire_bytes` that ran `algorithm` in `elapsed_us`; true when a report is due.
  bool record(std::uint64_t wire_bytes, Algorithm algorithm, double elapsed_us);
  // The quartiles of every bucket and algorithm that took an op since the last call; false when
  // none did.
  bool take_report(std::uint64_t generation, proto::OpTimesReport& report);
  // A new generation starts without times.
  void clear();

 private:
  struct Window {
    std::deque<double> times;
    bool changed = false;
  };
  std::mutex mutex_;
  std::map<std::pair<int, Algorithm>, Window> windows_;
  std::uint64_t unreported_ = 0;
};

}  // namespace gradsync::daemon
