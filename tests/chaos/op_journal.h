// What every rank's ops came to during a chaos run, in order, with when each began and ended:
// the rank drivers write it, the fault loop reads it to time each fault's effects.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collective/status.h"

namespace gradsync::chaos {

using Clock = std::chrono::steady_clock;

struct OpOutcome {
  enum class Kind { right, wrong, failed };
  Kind kind = Kind::right;
  Clock::time_point began;
  Clock::time_point ended;
  ErrorCode code = ErrorCode::ok;  // failed
  std::string error;               // failed: what the client was told
};

class OpJournal {
 public:
  explicit OpJournal(int slots) : slots_(slots) {}

  void record(int slot, OpOutcome outcome);

  // Slot `slot`'s first op of `kind` that ended after `after` (began after it too, with
  // `began_after`); nullopt if none has yet.
  std::optional<OpOutcome> first(int slot, OpOutcome::Kind kind, Clock::time_point after,
                                 bool began_after = false) const;
  // The failures of every slot that ended within [from, to).
  std::vector<OpOutcome> failures(Clock::time_point from, Clock::time_point to) const;

  struct Totals {
    int attempted = 0;
    int right = 0;
    int wrong = 0;
    int failed_clearly = 0;
    int failed_unclearly = 0;
    std::vector<std::string> unclear;  // what the unclear failures said, first few
  };
  Totals totals() const;

  // Whether a failure says what happened: a lost peer, an ended or changed generation, a lost
  // daemon or coordinator, each naming the rank or generation it concerns.
  static bool clear(const OpOutcome& failure);

 private:
  mutable std::mutex mutex_;
  std::vector<std::vector<OpOutcome>> slots_;
};

}  // namespace gradsync::chaos
