// The life of a worker's generations as its op thread sees them, as a pure state machine: events
// in (a generation formed, the coordinator's channel lost, the coordinator took the generation
// back or did not, the generation ended), the next step out (find the coordinator again while the
// generation runs on, end the generation, join the next one, or exit). No threads and no clock of
// its own: the caller passes the facts and the time, so tests drive it with a fake one.
//
//   forming ──formed──▶ serving ──channel lost, generation aborted──▶ ended ──▶ forming (rejoin)
//                         ▲  │                                          │
//                 taken back │ channel lost, generation running on      └──▶ exit (--no-rejoin)
//                         │  ▼
//                       reattaching ──not taken back──▶ ended
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "collective/status.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

struct LifecycleConfig {
  bool rejoin = true;  // false: a generation that ends ends the worker (--no-rejoin)
  std::chrono::milliseconds coordinator_timeout{0};  // to find a lost coordinator again
};

// What the op thread does next.
struct LifecycleStep {
  enum class Kind {
    none,            // nothing: the event was about a channel or a generation of the past
    end_generation,  // let the generation go, for the abort's reason (raise `raise` first)
    reattach,        // find the coordinator again (until `deadline`), asking it to take `running`
    form_next,       // join the next generation, as `previous_rank`
    exit,            // end the worker, for `failure`
  };
  Kind kind = Kind::none;
  Status raise;  // end_generation: raised as the abort's reason first, unless OK
  proto::Assignment running;
  std::chrono::steady_clock::time_point deadline;
  int previous_rank = -1;
  std::string failure;
};

// Facts about the moment the coordinator's channel was lost.
struct LossFacts {
  bool stopping = false;         // the worker is stopping
  bool aborted = false;          // the generation's abort is raised
  bool table_unsettled = false;  // a table version awaits its decision (table_gate.h)
};

class GenerationLifecycle {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  enum class Stage { forming, serving, reattaching, ended };

  explicit GenerationLifecycle(LifecycleConfig config) : config_(std::move(config)) {}

  // `assignment`'s generation formed on the coordinator's channel `channel`: the op thread serves
  // it, and that channel's loss is the one acted on.
  void formed(const proto::Assignment& assignment, std::uint64_t channel);
  // The coordinator took the running generation back, on channel `channel`.
  void taken_back(std::uint64_t channel);
  // Forming the next generation failed for `why`: the worker exits.
  LifecycleStep formation_failed(const Status& why);

  // Channel `channel` was lost. Only the served one's loss matters: a channel lost while a
  // generation formed, or while the worker reattached, is the forming thread's to see. A
  // coordinator lost while a table version is unsettled ends the generation: the ranks may not
  // agree from which op it runs.
  LifecycleStep channel_lost(std::uint64_t channel, const LossFacts& facts, TimePoint now);
  // No coordinator took the generation back in time.
  LifecycleStep not_taken_back(bool stopping);
  // The generation ended, for `why`: join the next, or exit without --rejoin.
  LifecycleStep ended(const Status& why);

  Stage stage() const { return stage_; }
  int rank() const { return assignment_.rank(); }
  // Of the generation served, or, between generations, of the one that ended.
  const proto::Assignment& assignment() const { return assignment_; }

 private:
  const LifecycleConfig config_;
  Stage stage_ = Stage::forming;
  proto::Assignment assignment_;
  std::uint64_t served_channel_ = 0;  // 0 while reattaching and between generations
};

}  // namespace gradsync::daemon
