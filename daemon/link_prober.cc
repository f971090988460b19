#include "daemon/link_prober.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "collective/link_probe.h"
#include "collective/reduce_kernels.h"
#include "engine/executor.h"

namespace gradsync::daemon {

namespace {

using Microseconds = std::chrono::duration<double, std::micro>;

class LinkProber {
 public:
  LinkProber(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
             const ProbeSettings& settings)
      : mesh_(mesh), abort_(abort), settings_(settings), data_(settings.bulk_bytes) {}

  // Times one probe op, in microseconds.
  Status time_op(const Schedule& schedule, double& elapsed_us) {
    engine::ExecuteOptions options;
    options.op_id = mesh_.next_op_id();
    options.segment_bytes = settings_.segment_bytes;
    options.deadline = net::Deadline::after(settings_.op_timeout);
    options.abort = &abort_;
    options.descriptor = {Collective::barrier, DataType::u8, ReduceOp::sum,
                          Algorithm::probe,    /*root=*/0,   schedule.shape.count};
    const auto start = net::Clock::now();
    Status status = engine::execute(schedule, {data_.data(), nullptr}, mesh_, options);
    elapsed_us = Microseconds(net::Clock::now() - start).count();
    return status;
  }

  // α and β of the link to `partner` (-1: this rank sits the round out, but runs the same ops).
  Status measure(int partner, proto::LinkMeasurement& link) {
    const int rank = mesh_.rank();
    const int p = mesh_.world_size();
    double elapsed_us = 0;
    // One round trip first, so that both ends start the timed ones together.
    Status status =
        time_op(ping_pong_schedule(rank, p, partner, 1, settings_.small_bytes), elapsed_us);
    if (!status.ok()) return status;
    status =
        time_op(ping_pong_schedule(rank, p, partner, settings_.round_trips, settings_.small_bytes),
                elapsed_us);
    if (!status.ok()) return status;
    const double alpha_us = elapsed_us / (2.0 * settings_.round_trips);
    // The faster of two exchanges: the first may still pay for TCP's slow start.
    double bulk_us = std::numeric_limits<double>::infinity();
    for (int attempt = 0; attempt < 2; ++attempt) {
      status = time_op(bulk_exchange_schedule(rank, p, partner, settings_.bulk_bytes), elapsed_us);
      if (!status.ok()) return status;
      bulk_us = std::min(bulk_us, elapsed_us);
    }
    link.set_from_rank(rank);
    link.set_to_rank(partner);
    link.set_alpha_us(alpha_us);
    link.set_beta_us_per_byte(std::max(bulk_us - alpha_us, 0.0) /
                              static_cast<double>(settings_.bulk_bytes));
    return {};
  }

 private:
  engine::PeerMesh& mesh_;
  const engine::AbortSignal& abort_;
  const ProbeSettings& settings_;
  std::vector<std::byte> data_;
};

// γ: the best of a few f32 sums over 1 MiB, per byte of the result.
double measure_reduce_us_per_byte() {
  constexpr std::size_t kCount = 256 << 10;
  std::vector<float> left(kCount, 1.0f);
  const std::vector<float> right(kCount, 2.0f);
  double best_us = std::numeric_limits<double>::infinity();
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto start = net::Clock::now();
    reduce(DataType::f32, ReduceOp::sum, reinterpret_cast<std::byte*>(left.data()),
           reinterpret_cast<const std::byte*>(left.data()),
           reinterpret_cast<const std::byte*>(right.data()), kCount);
    best_us = std::min(best_us, Microseconds(net::Clock::now() - start).count());
  }
  return best_us / static_cast<double>(kCount * sizeof(float));
}

}  // namespace

Status probe_links(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
                   const ProbeSettings& settings, proto::ProbeReport& report) {
  const auto start = net::Clock::now();
  LinkProber prober(mesh, abort, settings);
  report.Clear();
  report.set_generation(mesh.generation());
  report.set_rank(mesh.rank());
  for (int round = 0; round < tournament_rounds(mesh.world_size()); ++round) {
    const int partner = tournament_partner(mesh.rank(), mesh.world_size(), round);
    proto::LinkMeasurement link;
    if (Status status = prober.measure(partner, link); !status.ok()) {
      return Status(status.code(), "probing the links failed: " + status.message());
    }
    if (partner >= 0) *report.add_links() = link;
  }
  report.set_gamma_us_per_byte(measure_reduce_us_per_byte());
  report.set_probe_ms(std::chrono::duration<double, std::milli>(net::Clock::now() - start).count());
  return {};
}

}  // namespace gradsync::daemon
