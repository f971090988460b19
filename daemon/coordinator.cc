#include "daemon/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "daemon/plan_builder.h"
#include "daemon/ready_file.h"
#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

constexpr auto kJoinTimeout = std::chrono::seconds(10);
constexpr auto kSendTimeout = std::chrono::seconds(2);
constexpr std::uint64_t kGeneration = 1;

struct Member {
  net::UniqueFd socket;
  std::string from;
  proto::JoinRequest join;
  int rank = -1;
};

class Coordinator {
  // What the coordinator waits for: members, then (unless given a model) probe reports, then
  // calibration reports (unless the budget allows none); then the plan is out.
  enum class Stage { forming, probing, calibrating, published };

 public:
  explicit Coordinator(const CoordinatorConfig& config) : config_(config) {}

  int run() {
    net::UniqueFd listener;
    if (Status status = net::listen_tcp(config_.listen, listener); !status.ok()) {
      spdlog::error("coordinator: {}", status.message());
      return 2;
    }
    const net::HostPort bound = net::local_address(listener.get());
    spdlog::info("coordinator listening on {}:{} for a group of {}", config_.listen.host,
                 bound.port, config_.world_size);
    if (!config_.ready_file.empty()) {
      const std::string address = config_.listen.host + ":" + std::to_string(bound.port);
      if (Status status = write_ready_file(config_.ready_file, address); !status.ok()) {
        spdlog::error("coordinator: {}", status.message());
        return 2;
      }
    }
    while (true) {
      net::UniqueFd connection;
      if (!net::accept_connection(listener.get(), net::Deadline::after(std::chrono::seconds(1)),
                                  connection)
               .ok()) {
        continue;
      }
      auto member = std::make_shared<Member>();
      member->from = net::peer_address(connection.get()).to_string();
      member->socket = std::move(connection);
      std::thread([this, member] { serve(member); }).detach();
    }
  }

 private:
  void serve(const std::shared_ptr<Member>& member) {
    net::MessageReader reader(member->socket.get());
    proto::WorkerToCoordinator first;
    Status status = reader.receive(first, net::Deadline::after(kJoinTimeout));
    if (status.ok()) status = admit(member, first);
    if (!status.ok()) {
      spdlog::warn("coordinator: rejected a connection from {}: {}", member->from,
                   status.message());
      return;
    }
    // Heartbeats, and the reports it is asked for, until the worker stops sending them.
    while (true) {
      proto::WorkerToCoordinator message;
      status = reader.receive(message, net::Deadline::after(config_.heartbeat_timeout));
      if (!status.ok()) break;
      if (message.has_probe_report()) {
        status = take_probe_report(member, message.probe_report());
        if (!status.ok()) break;
      } else if (message.has_calibration_report()) {
        status = take_calibration_report(member, message.calibration_report());
        if (!status.ok()) break;
      } else if (!message.has_heartbeat()) {
        status = Status(ErrorCode::protocol_error, "a message other than a heartbeat");
        break;
      }
    }
    lose(member,
         status.code() == ErrorCode::deadline_exceeded
             ? "no heartbeat for " + std::to_string(config_.heartbeat_timeout.count()) + " ms"
             : status.message());
  }

  Status admit(const std::shared_ptr<Member>& member, const proto::WorkerToCoordinator& first) {
    if (!first.has_join()) {
      return Status(ErrorCode::protocol_error, "the first message is not a join request");
    }
    net::HostPort address;
    if (Status status = net::parse_host_port(first.join().data_address(), address); !status.ok()) {
      return Status(ErrorCode::invalid_argument, "bad data address: " + status.message());
    }
    const int requested = first.join().requested_rank();
    std::lock_guard lock(mutex_);
    if (formed_) {
      return Status(ErrorCode::invalid_argument,
                    "the group of " + std::to_string(config_.world_size) + " is complete");
    }
    if (requested < -1 || requested >= config_.world_size) {
      return Status(ErrorCode::invalid_argument, "asks for rank " + std::to_string(requested) +
                                                     " in a group of " +
                                                     std::to_string(config_.world_size));
    }
    for (const auto& other : pending_) {
      if (requested >= 0 && other->join.requested_rank() == requested) {
        return Status(ErrorCode::invalid_argument,
                      "asks for rank " + std::to_string(requested) + ", already taken");
      }
    }
    member->join = first.join();
    pending_.push_back(member);
    spdlog::info("coordinator: {} joined ({} of {}), data address {}", member->from,
                 pending_.size(), config_.world_size, first.join().data_address());
    if (static_cast<int>(pending_.size()) == config_.world_size) form_group();
    return {};
  }

  // Requested ranks first, the others in order of arrival.
  void form_group() {
    std::vector<bool> taken(config_.world_size, false);
    for (const auto& member : pending_) {
      if (member->join.requested_rank() >= 0) {
        member->rank = member->join.requested_rank();
        taken[member->rank] = true;
      }
    }
    int next = 0;
    for (const auto& member : pending_) {
      if (member->rank >= 0) continue;
      while (taken[next]) ++next;
      member->rank = next;
      taken[next] = true;
    }
    std::sort(pending_.begin(), pending_.end(),
              [](const auto& a, const auto& b) { return a->rank < b->rank; });
    spdlog::info("coordinator: group formed, generation {}; {}", kGeneration,
                 config_.network ? "the algorithm table comes from the given model"
                                 : "the workers are probing their links");
    proto::CoordinatorToWorker message;
    proto::Assignment& assignment = *message.mutable_assignment();
    assignment.set_generation(kGeneration);
    assignment.set_world_size(config_.world_size);
    assignment.set_probe_links(!config_.network);
    for (const auto& member : pending_) {
      proto::Peer& peer = *assignment.add_peers();
      peer.set_rank(member->rank);
      peer.set_data_address(member->join.data_address());
    }
    for (const auto& member : pending_) {
      assignment.set_rank(member->rank);
      const Status sent =
          net::send_message(member->socket.get(), message, net::Deadline::after(kSendTimeout));
      if (!sent.ok()) spdlog::warn("coordinator: cannot send rank {} its assignment", member->rank);
    }
    formed_ = true;
    probe_reports_.resize(pending_.size());
    calibration_reports_.resize(pending_.size());
    stage_ = Stage::probing;
    if (config_.network) {
      plan_ = plan_from_model(kGeneration, config_.world_size, *config_.network);
      publish();
    }
  }

  // Records a worker's report of what it was asked to measure in `stage`, once `check` (which
  // blames the sender) accepts it; `all` receives every rank's once the last one is in.
  template <typename Report>
  Status collect(const std::shared_ptr<Member>& member, const Report& report, Stage stage,
                 const Status& check, std::vector<std::optional<Report>>& slots,
                 std::optional<std::vector<Report>>& all) {
    if (aborted_) return Status(ErrorCode::aborted, "the group was aborted");
    if (stage_ != stage || slots[member->rank].has_value()) {
      return Status(ErrorCode::protocol_error, "a report the coordinator did not ask for");
    }
    if (!check.ok()) return check;
    slots[member->rank] = report;
    std::vector<Report> reports;
    for (const auto& slot : slots) {
      if (!slot) return {};
      reports.push_back(*slot);
    }
    all = std::move(reports);
    return {};
  }

  Status take_probe_report(const std::shared_ptr<Member>& member,
                           const proto::ProbeReport& report) {
    std::lock_guard lock(mutex_);
    std::optional<std::vector<proto::ProbeReport>> reports;
    const Status check = check_probe_report(report, kGeneration, member->rank, config_.world_size);
    if (Status status = collect(member, report, Stage::probing, check, probe_reports_, reports);
        !status.ok() || !reports) {
      return status;
    }
    plan_ = plan_from_reports(kGeneration, *reports);
    proto::CoordinatorToWorker message;
    calibration_request_ = calibration_request(plan_, config_.calibration_budget);
    if (calibration_request_.sizes().empty()) {
      publish();
      return {};
    }
    stage_ = Stage::calibrating;
    spdlog::info("coordinator: links probed in {:.0f} ms; calibrating all-reduce at {} sizes",
                 plan_.probe_ms, calibration_request_.sizes_size());
    *message.mutable_calibration_request() = calibration_request_;
    send_to_all(message, "the calibration request");
    return {};
  }

  Status take_calibration_report(const std::shared_ptr<Member>& member,
                                 const proto::CalibrationReport& report) {
    std::lock_guard lock(mutex_);
    std::optional<std::vector<proto::CalibrationReport>> reports;
    const Status check = check_calibration_report(report, calibration_request_, member->rank);
    if (Status status =
            collect(member, report, Stage::calibrating, check, calibration_reports_, reports);
        !status.ok() || !reports) {
      return status;
    }
    add_calibration(plan_, *reports);
    publish();
    return {};
  }

  void send_to_all(const proto::CoordinatorToWorker& message, const std::string& what) {
    for (const auto& member : pending_) {
      const Status sent =
          net::send_message(member->socket.get(), message, net::Deadline::after(kSendTimeout));
      if (!sent.ok()) spdlog::warn("coordinator: cannot send rank {} {}", member->rank, what);
    }
  }

  // Sends every member plan_; called with mutex_ held.
  void publish() {
    stage_ = Stage::published;
    spdlog::info("coordinator: generation {} plan ({}):\n{}", plan_.generation,
                 plan_.measured
                     ? "probing took " + std::to_string(plan_.probe_ms) + " ms, calibration " +
                           std::to_string(plan_.calibration_ms) + " ms"
                     : std::string("from the given model"),
                 describe(plan_));
    proto::CoordinatorToWorker message;
    to_proto(plan_, *message.mutable_plan());
    send_to_all(message, "the plan");
  }

  void lose(const std::shared_ptr<Member>& member, const std::string& reason) {
    std::lock_guard lock(mutex_);
    if (!formed_) {
      std::erase(pending_, member);
      spdlog::warn("coordinator: {} left before the group formed: {}", member->from, reason);
      return;
    }
    spdlog::warn("coordinator: lost rank {} ({}): {}", member->rank, member->from, reason);
    if (aborted_) return;
    aborted_ = true;
    proto::CoordinatorToWorker message;
    proto::Abort& abort = *message.mutable_abort();
    abort.set_generation(kGeneration);
    abort.add_lost_ranks(member->rank);
    to_proto(Status(ErrorCode::peer_lost,
                    "rank " + std::to_string(member->rank) + " was lost (" + reason + ")"),
             *abort.mutable_reason());
    // The lost member too: one that sent something wrong is still listening.
    for (const auto& other : pending_) {
      (void)net::send_message(other->socket.get(), message, net::Deadline::after(kSendTimeout));
    }
  }

  const CoordinatorConfig config_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<Member>> pending_;  // every member, sorted by rank once formed
  Stage stage_ = Stage::forming;
  std::vector<std::optional<proto::ProbeReport>> probe_reports_;  // by rank
  std::vector<std::optional<proto::CalibrationReport>> calibration_reports_;
  proto::CalibrationRequest calibration_request_;
  GroupPlan plan_;
  bool formed_ = false;
  bool aborted_ = false;
};

}  // namespace

int run_coordinator(const CoordinatorConfig& config) { return Coordinator(config).run(); }

}  // namespace gradsync::daemon
