// Where a new table version takes effect on a worker (docs/architecture.md §9): at the same op on
// every rank, so that no op ever runs two algorithms.
//
// The coordinator proposes a version; every rank answers with the first op it has not started
// and promises to start no op at or past that + kTableLead before it knows where the version takes
// effect. The coordinator takes the largest answer + kTableLead: no rank has started that op with
// the old table, and every rank runs it and every later op with the new one. The lead lets the
// op thread run on while the answers travel; it waits only when the coordinator is slower than
// kTableLead ops.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

#include "collective/group_plan.h"
#include "collective/status.h"

namespace gradsync::daemon {

inline constexpr std::uint64_t kTableLead = 64;
// The coordinator proposes at most one version this often: a coordinator lost while a version is
// unsettled (a round trip to every rank) ends the generation.
inline constexpr std::chrono::milliseconds kTableVersionInterval{250};

class TableGate {
 public:
  // An op waits at most `wait_limit` for a version to be settled (the coordinator is gone then).
  explicit TableGate(std::chrono::milliseconds wait_limit) : wait_limit_(wait_limit) {}

  // A new generation: its ops run its published plan until a version replaces it; every
  // proposal is forgotten.
  void reset(std::uint64_t generation);

  // The coordinator proposes `version` for `generation` (the control thread): returns the first
  // op this rank has not started, and from now on lets no op at or past it + kTableLead start
  // before decide().
  Status propose(std::uint64_t generation, std::uint64_t version, std::uint64_t& next_op);
  // `plan` (checked by the caller) runs from op `from_op` on: past the promise, and past the
  // versions decided before it.
  Status decide(std::uint64_t from_op, const GroupPlan& plan);
  // Whether a proposal awaits its decision: a coordinator lost now leaves the ranks unsure where
  // the version takes effect, so the generation cannot go on.
  bool unsettled() const;
  // The coordinator is lost: an op that waits for a decision fails now, and so does every later
  // one that would (the generation ends).
  void cancel();

  // On the op thread, before op `op_id` starts: `plan` receives the plan it runs with when that
  // is another than the last op's. Waits while a proposal promised not to start `op_id` unsettled,
  // and fails after the wait limit.
  Status admit(std::uint64_t op_id, std::optional<GroupPlan>& plan);

 private:
  const std::chrono::milliseconds wait_limit_;
  mutable std::mutex mutex_;
  std::condition_variable settled_;
  std::uint64_t generation_ = 0;
  std::uint64_t next_op_ = 0;  // the first op not admitted
  // Proposed and not decided: the version, and the first op that must wait.
  std::optional<std::uint64_t> proposed_version_;
  std::uint64_t hold_from_ = 0;
  bool cancelled_ = false;
  // Decided and not yet in effect, in order: from which op, and the plan (the coordinator may
  // settle the next version before this rank reaches the last one's op).
  std::deque<std::pair<std::uint64_t, GroupPlan>> decided_;
};

}  // namespace gradsync::daemon
