#include "chaos/op_journal.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace gradsync::chaos {

void OpJournal::record(int slot, OpOutcome outcome) {
  std::lock_guard lock(mutex_);
  slots_[slot].push_back(std::move(outcome));
}

std::optional<OpOutcome> OpJournal::first(int slot, OpOutcome::Kind kind, Clock::time_point after,
                                          bool began_after) const {
  std::lock_guard lock(mutex_);
  for (const OpOutcome& outcome : slots_[slot]) {
    if (outcome.kind == kind && outcome.ended > after && (!began_after || outcome.began > after)) {
      return outcome;
    }
  }
  return std::nullopt;
}

std::vector<OpOutcome> OpJournal::failures(Clock::time_point from, Clock::time_point to) const {
  std::lock_guard lock(mutex_);
  std::vector<OpOutcome> found;
  for (const auto& slot : slots_) {
    for (const OpOutcome& outcome : slot) {
      if (outcome.kind == OpOutcome::Kind::failed && outcome.ended >= from && outcome.ended < to) {
        found.push_back(outcome);
      }
    }
  }
  return found;
}

OpJournal::Totals OpJournal::totals() const {
  std::lock_guard lock(mutex_);
  Totals totals;
  for (const auto& slot : slots_) {
    for (const OpOutcome& outcome : slot) {
      ++totals.attempted;
      switch (outcome.kind) {
        case OpOutcome::Kind::right:
          ++totals.right;
          break;
        case OpOutcome::Kind::wrong:
          ++totals.wrong;
          break;
        case OpOutcome::Kind::failed:
          if (clear(outcome)) {
            ++totals.failed_clearly;
          } else {
            ++totals.failed_unclearly;
            if (totals.unclear.size() < 10) totals.unclear.push_back(outcome.error);
          }
          break;
      }
    }
  }
  return totals;
}

bool OpJournal::clear(const OpOutcome& failure) {
  const bool expected_code =
      failure.code == ErrorCode::peer_lost || failure.code == ErrorCode::aborted ||
      failure.code == ErrorCode::group_changed || failure.code == ErrorCode::deadline_exceeded;
  constexpr std::array<std::string_view, 4> kNames{"rank ", "generation", "daemon", "coordinator"};
  const bool names_what = std::any_of(kNames.begin(), kNames.end(), [&](std::string_view name) {
    return failure.error.find(name) != std::string::npos;
  });
  return expected_code && names_what;
}

}  // namespace gradsync::chaos
