#include "daemon/link_prober.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "collective/link_probe.h"
#include "collective/reduce_kernels.h"
#include "net/deadline.h"

namespace gradsync::daemon {

namespace {

using Microseconds = std::chrono::duration<double, std::micro>;

class LinkProber {
 public:
  LinkProber(engine::PeerMesh& mesh, const engine::AbortSignal& abort,
             const ProbeSettings& settings)
      : mesh_(mesh), abort_(abort), settings_(settings), data_(settings.bulk_bytes) {}

  // One untimed bulk exchange: the first a process makes pays for first-touch memory (the socket's
  // and the buffers'), which made the first round's links measure several times slower.
  Status warm_up(int partner) {
    double elapsed_us = 0;
    return time_bulk_exchange(partner, elapsed_us);
  }

  // α and β of the link to `partner` (-1: this rank sits the round out, but runs the same ops).
  Status measure(int partner, proto::LinkMeasurement& link) {
    const int rank = mesh_.rank();
    const int p = mesh_.world_size();
    double elapsed_us = 0;
    // One round trip first, so that both ends start the timed ones together.
    if (Status status =
            time(ping_pong_schedule(rank, p, partner, 1, settings_.small_bytes), elapsed_us);
        !status.ok()) {
      return status;
    }
    // The median op: one that a descheduled rank slowed down does not count.
    std::vector<double> alphas;
    for (int op = 0; op < settings_.round_trip_ops; ++op) {
      const Schedule round_trips =
          ping_pong_schedule(rank, p, partner, settings_.round_trips_per_op, settings_.small_bytes);
      if (Status status = time(round_trips, elapsed_us); !status.ok()) return status;
      alphas.push_back(elapsed_us / (2.0 * settings_.round_trips_per_op));
    }
    std::nth_element(alphas.begin(), alphas.begin() + alphas.size() / 2, alphas.end());
    const double alpha_us = alphas[alphas.size() / 2];
    // The faster of two exchanges: the first may still pay for TCP's slow start.
    double bulk_us = std::numeric_limits<double>::infinity();
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (Status status = time_bulk_exchange(partner, elapsed_us); !status.ok()) return status;
      bulk_us = std::min(bulk_us, elapsed_us);
    }
    link.set_from_rank(rank);
    link.set_to_rank(partner);
    link.set_alpha_us(alpha_us);
    // On a loaded host the median round trip can exceed the whole exchange; the link is not free
    // then, and the exchange's own time is the bound there is.
    const double transfer_us = bulk_us > alpha_us ? bulk_us - alpha_us : bulk_us;
    link.set_beta_us_per_byte(transfer_us / static_cast<double>(settings_.bulk_bytes));
    return {};
  }

 private:
  Status time_bulk_exchange(int partner, double& elapsed_us) {
    return time(
        bulk_exchange_schedule(mesh_.rank(), mesh_.world_size(), partner, settings_.bulk_bytes),
        elapsed_us);
  }

  Status time(const Schedule& schedule, double& elapsed_us) {
    const engine::OpDescriptor descriptor{
        Collective::barrier, DataType::u8, ReduceOp::sum, Algorithm::probe, 0,
        schedule.shape.count};
    return run_timed_op(mesh_, abort_, settings_.ops, schedule, descriptor, data_.data(),
                        elapsed_us);
  }

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
  if (Status status = prober.warm_up(tournament_partner(mesh.rank(), mesh.world_size(), 0));
      !status.ok()) {
    return Status(status.code(), "probing the links failed: " + status.message());
  }
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
