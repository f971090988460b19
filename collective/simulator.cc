#include "collective/simulator.h"

#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "collective/reduce_kernels.h"
#include "collective/validate.h"

namespace gradsync {

namespace {

using Bytes = std::vector<std::byte>;

class Simulation {
 public:
  Simulation(std::span<const Schedule> schedules, std::span<RankBuffers> buffers, DataType type,
             ReduceOp op)
      : schedules_(schedules), buffers_(buffers), type_(type), op_(op) {}

  SimulationReport run() {
    SimulationReport report;
    report.traffic.resize(schedules_.size());
    traffic_ = &report.traffic;
    report.status = check_agreement();
    if (!report.status.ok()) return report;
    scratch_.resize(schedules_.size());
    for (std::size_t r = 0; r < schedules_.size(); ++r) {
      scratch_[r].resize(schedules_[r].size_of(BufferId::scratch));
    }
    for (std::size_t round = 0; round < schedules_[0].rounds.size(); ++round) {
      report.status = run_round(round);
      if (!report.status.ok()) return report;
    }
    finish();
    report.status = check_results();
    return report;
  }

 private:
  static Status failure(const std::string& message) { return Status(ErrorCode::internal, message); }

  Status check_agreement() {
    if (schedules_.empty()) return failure("no schedules to simulate");
    if (buffers_.size() != schedules_.size()) {
      return failure(std::to_string(schedules_.size()) + " schedules but " +
                     std::to_string(buffers_.size()) + " buffer sets");
    }
    const Schedule& first = schedules_[0];
    const OpShape& shape = first.shape;
    if (shape.world_size != static_cast<int>(schedules_.size())) {
      return failure("the schedules are for " + std::to_string(shape.world_size) + " ranks, but " +
                     std::to_string(schedules_.size()) + " were given");
    }
    if (reduces(shape.collective) && shape.element_size != element_size(type_)) {
      return failure("the schedules use " + std::to_string(shape.element_size) +
                     "-byte elements, " + std::string(name(type_)) + " has " +
                     std::to_string(element_size(type_)));
    }
    for (std::size_t r = 0; r < schedules_.size(); ++r) {
      const Schedule& schedule = schedules_[r];
      const std::string who = "rank " + std::to_string(r);
      if (schedule.rank != static_cast<int>(r)) {
        return failure(who + "'s schedule says it is rank " + std::to_string(schedule.rank));
      }
      if (schedule.shape.collective != shape.collective ||
          schedule.shape.world_size != shape.world_size || schedule.shape.count != shape.count ||
          schedule.shape.element_size != shape.element_size || schedule.shape.root != shape.root ||
          schedule.algorithm != first.algorithm) {
        return failure(who + "'s schedule is for another op than rank 0's");
      }
      if (schedule.rounds.size() != first.rounds.size()) {
        return failure(who + " has " + std::to_string(schedule.rounds.size()) +
                       " rounds, rank 0 has " + std::to_string(first.rounds.size()));
      }
      if (buffers_[r].data.size() != schedule.size_of(BufferId::data) ||
          buffers_[r].output.size() != schedule.size_of(BufferId::output)) {
        return failure(who + "'s buffers are not the size its schedule needs");
      }
      if (Status status = validate(schedule); !status.ok()) return status;
    }
    return {};
  }

  std::byte* locate(std::size_t rank, const Span& span) {
    switch (span.buffer) {
      case BufferId::data:
        return buffers_[rank].data.data() + span.offset;
      case BufferId::output:
        return buffers_[rank].output.data() + span.offset;
      case BufferId::scratch:
        return scratch_[rank].data() + span.offset;
    }
    return nullptr;
  }

  Bytes gather(std::size_t rank, const std::vector<Span>& spans) {
    Bytes message;
    for (const Span& span : spans) {
      const std::byte* source = locate(rank, span);
      message.insert(message.end(), source, source + span.length);
    }
    return message;
  }

  void deliver(std::size_t rank, const Recv& recv, const Bytes& message) {
    const std::byte* cursor = message.data();
    for (const Span& span : recv.spans) {
      std::byte* destination = locate(rank, span);
      const std::size_t count = span.length / schedules_[rank].shape.element_size;
      switch (recv.action) {
        case RecvAction::copy:
          if (span.length > 0) std::memcpy(destination, cursor, span.length);
          break;
        case RecvAction::reduce_local_first:
          reduce(type_, op_, destination, destination, cursor, count);
          break;
        case RecvAction::reduce_received_first:
          reduce(type_, op_, destination, cursor, destination, count);
          break;
      }
      cursor += span.length;
    }
  }

  Status run_round(std::size_t round) {
    const std::string when = "round " + std::to_string(round) + ": ";
    // Every send reads the buffers as they were when the round began.
    std::map<std::pair<int, int>, std::deque<Bytes>> in_flight;
    for (std::size_t r = 0; r < schedules_.size(); ++r) {
      for (const Send& send : schedules_[r].rounds[round].sends) {
        in_flight[{static_cast<int>(r), send.peer}].push_back(gather(r, send.spans));
        (*traffic_)[r].messages_sent += 1;
        (*traffic_)[r].bytes_sent += send.bytes();
      }
    }
    for (std::size_t r = 0; r < schedules_.size(); ++r) {
      for (const Recv& recv : schedules_[r].rounds[round].recvs) {
        auto& queue = in_flight[{recv.peer, static_cast<int>(r)}];
        const std::string pair = "rank " + std::to_string(r) + " expects a message from rank " +
                                 std::to_string(recv.peer);
        if (queue.empty()) return failure(when + pair + ", which sends it none");
        const Bytes message = std::move(queue.front());
        queue.pop_front();
        if (message.size() != recv.bytes()) {
          return failure(when + pair + " of " + std::to_string(recv.bytes()) +
                         " bytes, which sends " + std::to_string(message.size()));
        }
        deliver(r, recv, message);
        (*traffic_)[r].messages_received += 1;
        (*traffic_)[r].bytes_received += message.size();
      }
    }
    for (const auto& [pair, queue] : in_flight) {
      if (!queue.empty()) {
        return failure(when + "rank " + std::to_string(pair.first) + " sends " +
                       std::to_string(queue.front().size()) + " bytes to rank " +
                       std::to_string(pair.second) + ", which does not receive them");
      }
    }
    for (std::size_t r = 0; r < schedules_.size(); ++r) {
      for (const LocalCopy& copy : schedules_[r].rounds[round].copies) {
        // An empty buffer has no address to copy from or to.
        if (copy.from.length > 0) {
          std::memcpy(locate(r, copy.to), locate(r, copy.from), copy.from.length);
        }
      }
    }
    return {};
  }

  void finish() {
    if (!reduces(schedules_[0].shape.collective)) return;
    for (std::size_t r = 0; r < schedules_.size(); ++r) {
      const Span& result = schedules_[r].result;
      finalize_average(type_, op_, locate(r, result), result.length / element_size(type_),
                       static_cast<int>(schedules_.size()));
    }
  }

  Status check_results() {
    if (!result_is_replicated(schedules_[0].shape.collective)) return {};
    const Span& reference = schedules_[0].result;
    const std::byte* expected = locate(0, reference);
    for (std::size_t r = 1; r < schedules_.size(); ++r) {
      const Span& result = schedules_[r].result;
      const std::byte* actual = locate(r, result);
      if (result.length != reference.length) {
        return failure("rank " + std::to_string(r) + "'s result has " +
                       std::to_string(result.length) + " bytes, rank 0's has " +
                       std::to_string(reference.length));
      }
      for (std::uint64_t i = 0; i < result.length; ++i) {
        if (actual[i] != expected[i]) {
          return failure("rank " + std::to_string(r) +
                         " ends with a result that differs from rank 0's at byte " +
                         std::to_string(i));
        }
      }
    }
    return {};
  }

  std::span<const Schedule> schedules_;
  std::span<RankBuffers> buffers_;
  DataType type_;
  ReduceOp op_;
  std::vector<Bytes> scratch_;
  std::vector<RankTraffic>* traffic_ = nullptr;
};

}  // namespace

SimulationReport simulate(std::span<const Schedule> schedules, std::span<RankBuffers> buffers,
                          DataType type, ReduceOp op) {
  return Simulation(schedules, buffers, type, op).run();
}

}  // namespace gradsync
