#include "daemon/calibrator.h"

#include <algorithm>
#include <vector>

#include "collective/algorithms.h"
#include "net/deadline.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

// The coordinator asks for sizes within its time budget; this bounds a request gone wrong.
constexpr std::uint64_t kMaxCalibrationBytes = 64ull << 20;
constexpr int kMaxRepetitions = 16;

// One algorithm timed at one size, and where its repetitions' times go.
struct Contender {
  Schedule schedule;
  engine::OpDescriptor descriptor;
  proto::CalibrationSample* sample;
};

// Runs ops over the mesh and times them; a failure says it was the calibration's.
class OpTimer {
 public:
  OpTimer(engine::PeerMesh& mesh, const engine::AbortSignal& abort, const OwnOpSettings& settings)
      : mesh_(mesh),
        abort_(abort),
        settings_(settings),
        barrier_(dissemination_barrier(mesh.rank(), mesh.world_size())) {}

  // `elapsed_us` receives this rank's time for the op.
  Status run(const Schedule& schedule, const engine::OpDescriptor& descriptor, std::byte* bytes,
             double& elapsed_us) const {
    const Status status =
        run_timed_op(mesh_, abort_, settings_, schedule, descriptor, bytes, elapsed_us);
    if (status.ok()) return status;
    return Status(status.code(), "calibration failed: " + status.message());
  }

  // Untimed: the op after it starts on every rank together.
  Status barrier() const {
    double elapsed_us = 0;
    return run(barrier_, kBarrierDescriptor, nullptr, elapsed_us);
  }

 private:
  static constexpr engine::OpDescriptor kBarrierDescriptor{
      Collective::barrier, DataType::u8, ReduceOp::sum, Algorithm::dissemination, 0, 0};

  engine::PeerMesh& mesh_;
  const engine::AbortSignal& abort_;
  const OwnOpSettings& settings_;
  Schedule barrier_;
};

// Every size within bounds (a whole number of f32 elements, a sane repetition count).
Status check_sizes(const proto::CalibrationRequest& request) {
  for (const proto::CalibrationRequest::Size& size : request.sizes()) {
    if (size.bytes() % 4 != 0 || size.bytes() > kMaxCalibrationBytes || size.repetitions() < 1 ||
        size.repetitions() > kMaxRepetitions) {
      return Status(ErrorCode::protocol_error,
                    "the coordinator asked to calibrate at " + std::to_string(size.bytes()) +
                        " bytes " + std::to_string(size.repetitions()) +
                        " times: not a whole number of f32 elements up to 64 MiB, 1 to " +
                        std::to_string(kMaxRepetitions) + " times");
    }
  }
  return {};
}

// The requested algorithms at `size`, each with its sample (the size, no times yet) in `report`.
Status contenders_at(const proto::CalibrationRequest::Size& size, const engine::PeerMesh& mesh,
                     proto::CalibrationReport& report, std::vector<Contender>& contenders) {
  const std::uint64_t bytes = size.bytes();
  const OpShape shape{Collective::allreduce, mesh.world_size(), bytes / 4, 4};
  for (const int requested : size.algorithms()) {
    const auto algorithm = from_proto(static_cast<proto::Algorithm>(requested));
    if (!algorithm || !supports(Collective::allreduce, *algorithm)) {
      return Status(ErrorCode::protocol_error,
                    "the coordinator asked to calibrate an algorithm that is not an all-reduce");
    }
    proto::CalibrationSample& sample = *report.add_samples();
    sample.set_algorithm(to_proto(*algorithm));
    sample.set_bytes(bytes);
    contenders.push_back(
        {build_schedule(shape, *algorithm, mesh.rank()),
         {Collective::allreduce, DataType::f32, ReduceOp::sum, *algorithm, 0, shape.count},
         &sample});
  }
  return {};
}

// One untimed op of each first: the first at a size grows the executor's buffers (page faults).
// Then the contenders take turns, one repetition of each and then the next (each repetition
// starting one further along), so that what slows a stretch of time (another process, a busy
// core) or follows a particular algorithm slows them all alike. Every timed op starts together,
// as a client's op does after its barrier; back to back, a rank that starts late finds its data
// already sent and times too little.
Status race(const OpTimer& timer, const std::vector<Contender>& contenders, int repetitions,
            std::byte* data) {
  double elapsed_us = 0;
  for (const Contender& contender : contenders) {
    if (Status status = timer.run(contender.schedule, contender.descriptor, data, elapsed_us);
        !status.ok()) {
      return status;
    }
  }
  for (int repetition = 0; repetition < repetitions; ++repetition) {
    for (std::size_t turn = 0; turn < contenders.size(); ++turn) {
      const Contender& contender =
          contenders[(turn + static_cast<std::size_t>(repetition)) % contenders.size()];
      if (Status status = timer.barrier(); !status.ok()) return status;
      if (Status status = timer.run(contender.schedule, contender.descriptor, data, elapsed_us);
          !status.ok()) {
        return status;
      }
      contender.sample->add_repetition_us(elapsed_us);
    }
  }
  return {};
}

}  // namespace

Status calibrate(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
                 const OwnOpSettings& settings, const proto::CalibrationRequest& request,
                 proto::CalibrationReport& report) {
  const auto start = net::Clock::now();
  if (Status status = check_sizes(request); !status.ok()) return status;
  std::uint64_t largest = 0;
  for (const proto::CalibrationRequest::Size& size : request.sizes()) {
    largest = std::max(largest, size.bytes());
  }
  // Zeros: every sum stays zero, so no op meets a slow path for infinities or denormals.
  std::vector<std::byte> data(largest);
  const OpTimer timer(mesh, abort, settings);
  report.Clear();
  report.set_generation(mesh.generation());
  report.set_rank(mesh.rank());
  for (const proto::CalibrationRequest::Size& size : request.sizes()) {
    std::vector<Contender> contenders;
    if (Status status = contenders_at(size, mesh, report, contenders); !status.ok()) return status;
    if (Status status = race(timer, contenders, size.repetitions(), data.data()); !status.ok()) {
      return status;
    }
  }
  report.set_calibration_ms(
      std::chrono::duration<double, std::milli>(net::Clock::now() - start).count());
  return {};
}

}  // namespace gradsync::daemon
