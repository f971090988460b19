#include "daemon/generation_former.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/calibrator.h"
#include "daemon/link_prober.h"
#include "net/message_stream.h"
#include "net/socket.h"
#include "net/socket_channels.h"

namespace gradsync::daemon {

namespace {

constexpr auto kMeshTimeout = std::chrono::seconds(30);
// Between attempts to reach a coordinator that is gone, or restarting.
constexpr auto kReattachBackoff = std::chrono::milliseconds(100);

JoinSettings join_settings(const WorkerConfig& config) {
  JoinSettings settings;
  settings.coordinator = config.coordinator.to_string();
  settings.requested_rank = config.requested_rank;
  settings.local_ranks = config.local_ranks;
  settings.secret = config.secret;
  settings.join_timeout = config.join_timeout;
  return settings;
}

}  // namespace

GenerationFormer::GenerationFormer(const WorkerConfig& config, CoordinatorLink& link,
                                   DataPort& data_port, std::uint16_t data_port_number,
                                   engine::AbortSignal& abort)
    : config_(config),
      join_settings_(join_settings(config)),
      link_(link),
      data_port_(data_port),
      data_port_number_(data_port_number),
      abort_(abort) {}

GenerationFormer::~GenerationFormer() { wait(); }

void GenerationFormer::wait() {
  if (thread_.joinable()) thread_.join();
}

Status GenerationFormer::form(int previous_rank, Generation& formed) {
  while (true) {
    bool assigned = false;
    const Status status = form_generation(previous_rank, formed, assigned);
    if (status.ok() || !assigned || !abort_.raised() || link_.stopping()) return status;
    spdlog::warn("worker: generation {} ended while it formed ({}); joining the next",
                 formed.assignment.generation(), abort_.reason().message());
    previous_rank = formed.assignment.rank();
    formed = Generation{};
    if (!link_.close_for_next_generation()) return status;
    data_port_.expect_new_plan();
  }
}

void GenerationFormer::form_beside(int previous_rank, Formed done) {
  beside([this, previous_rank, done = std::move(done)] {
    link_.close_for_next_generation();
    data_port_.expect_new_plan();
    auto formed = std::make_shared<Generation>();
    const Status status = form(previous_rank, *formed);
    done(status, std::move(formed));
  });
}

void GenerationFormer::reattach_beside(proto::Assignment running, net::Deadline deadline,
                                       Reattached done) {
  beside([this, running = std::move(running), deadline, done = std::move(done)] {
    reattach(running, deadline, done);
  });
}

void GenerationFormer::beside(std::function<void()> work) {
  wait();
  thread_ = std::thread(std::move(work));
}

Status GenerationFormer::form_generation(int previous_rank, Generation& formed, bool& assigned) {
  JoinHandshake handshake = JoinHandshake::to_form(join_settings_, previous_rank);
  net::UniqueFd control;
  if (Status status = connect(handshake, net::Deadline::after(config_.join_timeout), control);
      !status.ok()) {
    return status;
  }
  ControlChannel& channel =
      link_.open(std::move(control), ControlChannel::OnLoss::end_generation, formed.channel);
  proto::CoordinatorToWorker message;
  Status status;
  while (status.ok() && !handshake.assigned()) {
    status = next(handshake, channel, message);
    if (status.ok()) status = handshake.answered(message);
  }
  if (!status.ok()) return status;
  channel.proven();
  const MeshPlan& plan = handshake.mesh_plan();
  formed.layout = plan.layout;
  assigned = true;
  formed.assignment = handshake.assignment();
  spdlog::info("worker: rank {} of {}, generation {}", plan.rank, plan.world_size, plan.generation);
  const auto with_rank = [&](const Status& failed) {
    return Status(failed.code(), "rank " + std::to_string(plan.rank) + ": " + failed.message());
  };
  MeshSockets sockets;
  status = data_port_.form_mesh(plan, net::Deadline::after(kMeshTimeout), abort_.fd(), sockets);
  if (!status.ok()) return with_rank(status);
  formed.mesh = std::make_unique<engine::PeerMesh>(
      plan.rank, plan.world_size, plan.generation,
      std::make_unique<net::SocketChannels>(std::move(sockets.collectives)));
  formed.point_to_point = std::make_unique<net::SocketChannels>(std::move(sockets.point_to_point));
  if (Status ready = prepare_plan(handshake, formed, channel); !ready.ok()) return with_rank(ready);
  spdlog::info("worker rank {}: generation {} plan:\n{}", plan.rank, plan.generation,
               describe(formed.plan));
  return {};
}

Status GenerationFormer::connect(JoinHandshake& handshake, net::Deadline deadline,
                                 net::UniqueFd& control) {
  if (Status status =
          net::connect_tcp_retrying(config_.coordinator, deadline, control, abort_.fd());
      !status.ok()) {
    return Status(status.code(), "cannot reach the coordinator at " +
                                     config_.coordinator.to_string() + ": " + status.message());
  }
  // The coordinator speaks first: the challenge this worker's join proves the secret over.
  // Nothing else comes before the join, so this reader takes nothing the channel's should.
  proto::CoordinatorToWorker first;
  if (Status status = net::MessageReader(control.get()).receive(first, deadline); !status.ok()) {
    return Status(status.code(), "the coordinator at " + config_.coordinator.to_string() +
                                     " sent no challenge: " + status.message());
  }
  const std::string host = config_.advertise_host.empty() ? net::local_address(control.get()).host
                                                          : config_.advertise_host;
  proto::WorkerToCoordinator join;
  if (Status status = handshake.challenged(first, host, data_port_number_, join); !status.ok()) {
    return status;
  }
  spdlog::info("worker: joining {} with data address {}", config_.coordinator.to_string(),
               join.join().data_address());
  return net::send_message(control.get(), join, deadline);
}

Status GenerationFormer::next(JoinHandshake& handshake, ControlChannel& channel,
                              proto::CoordinatorToWorker& message) {
  const Awaited awaited = handshake.awaited(net::Clock::now());
  return channel.next(awaited.timeout, awaited.what, message);
}

Status GenerationFormer::prepare_plan(JoinHandshake& handshake, Generation& formed,
                                      ControlChannel& channel) {
  engine::PeerMesh& mesh = *formed.mesh;
  OwnOpSettings own_ops;
  own_ops.segment_bytes = config_.segment_bytes;
  own_ops.spin = config_.spin;
  own_ops.stall_timeout = config_.stall_timeout;
  if (formed.assignment.probe_links()) {
    proto::WorkerToCoordinator report;
    ProbeSettings settings;
    settings.ops = own_ops;
    Status status = probe_links(mesh, abort_, settings, *report.mutable_probe_report());
    if (!status.ok()) return status;
    channel.send(report);
    spdlog::info("worker rank {}: probed {} links in {:.0f} ms", mesh.rank(),
                 report.probe_report().links_size(), report.probe_report().probe_ms());
  }
  // The plan, or first a calibration request.
  for (bool asked_to_calibrate = true; asked_to_calibrate;) {
    proto::CoordinatorToWorker message;
    if (Status status = next(handshake, channel, message); !status.ok()) return status;
    if (Status status = handshake.planned(message, asked_to_calibrate); !status.ok()) {
      return status;
    }
    if (!asked_to_calibrate) break;
    proto::WorkerToCoordinator report;
    if (Status status = calibrate(mesh, abort_, own_ops, message.calibration_request(),
                                  *report.mutable_calibration_report());
        !status.ok()) {
      return status;
    }
    channel.send(report);
  }
  formed.plan_message = handshake.plan_message();
  formed.plan = handshake.plan();
  return {};
}

void GenerationFormer::reattach(const proto::Assignment& running, net::Deadline deadline,
                                const Reattached& done) {
  Status status;
  std::uint64_t channel = 0;
  while (!abort_.raised()) {
    status = take_back(running, deadline, channel);
    if (status.ok()) {
      spdlog::info("worker rank {}: the coordinator took generation {} back", running.rank(),
                   running.generation());
      done(channel);
      return;
    }
    if (abort_.raised() || deadline.expired()) break;
    spdlog::warn("worker rank {}: the coordinator did not take generation {} back yet: {}",
                 running.rank(), running.generation(), status.message());
    const net::Deadline pause(std::min(deadline.when(), net::Clock::now() + kReattachBackoff));
    (void)net::wait_unless_cancelled(-1, 0, pause, abort_.fd(), "a pause between attempts");
  }
  if (!abort_.raised()) {
    abort_.raise(
        Status(ErrorCode::aborted, "no coordinator at " + config_.coordinator.to_string() +
                                       " took the group back within " +
                                       std::to_string(config_.coordinator_timeout.count()) +
                                       " ms (last: " + status.message() + ")"));
  }
  done(std::nullopt);
}

Status GenerationFormer::take_back(const proto::Assignment& running, net::Deadline deadline,
                                   std::uint64_t& channel_number) {
  JoinHandshake handshake = JoinHandshake::to_take_back(join_settings_, running, deadline.when());
  net::UniqueFd control;
  if (Status status = connect(handshake, deadline, control); !status.ok()) return status;
  ControlChannel& channel =
      link_.open(std::move(control), ControlChannel::OnLoss::keep_generation, channel_number);
  proto::CoordinatorToWorker message;
  if (Status status = next(handshake, channel, message); !status.ok()) return status;
  const Status status = handshake.answered(message);
  // The coordinator proved that the group is over (it runs another): so it is here too.
  if (handshake.ended()) abort_.raise(status);
  if (status.ok()) channel.proven();
  return status;
}

}  // namespace gradsync::daemon
