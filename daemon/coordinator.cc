#include "daemon/coordinator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/algorithm_table.h"
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
    proto::WorkerToCoordinator first;
    Status status =
        net::receive_message(member->socket.get(), first, net::Deadline::after(kJoinTimeout));
    if (status.ok()) status = admit(member, first);
    if (!status.ok()) {
      spdlog::warn("coordinator: rejected a connection from {}: {}", member->from,
                   status.message());
      return;
    }
    // Heartbeats until the worker stops sending them.
    while (true) {
      proto::WorkerToCoordinator message;
      status = net::receive_message(member->socket.get(), message,
                                    net::Deadline::after(config_.heartbeat_timeout));
      if (!status.ok()) break;
      if (!message.has_heartbeat()) {
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
    const AlgorithmTable table = AlgorithmTable::build(config_.world_size, config_.network);
    spdlog::info(
        "coordinator: group formed, generation {}; algorithm table (alpha {} us, beta {} "
        "us/byte):\n{}",
        kGeneration, config_.network.alpha_us, config_.network.beta_us_per_byte, table.describe());
    proto::CoordinatorToWorker message;
    proto::Assignment& assignment = *message.mutable_assignment();
    assignment.set_generation(kGeneration);
    assignment.set_world_size(config_.world_size);
    for (const auto& member : pending_) {
      proto::Peer& peer = *assignment.add_peers();
      peer.set_rank(member->rank);
      peer.set_data_address(member->join.data_address());
    }
    for (const Threshold& threshold : table.thresholds()) {
      proto::AlgorithmThreshold& entry = *assignment.add_algorithm_table();
      entry.set_collective(to_proto(threshold.collective));
      entry.set_min_bytes(threshold.min_bytes);
      entry.set_algorithm(to_proto(threshold.algorithm));
      entry.set_predicted_alpha_us(config_.network.alpha_us);
      entry.set_predicted_beta_us_per_byte(config_.network.beta_us_per_byte);
    }
    for (const auto& member : pending_) {
      assignment.set_rank(member->rank);
      const Status sent =
          net::send_message(member->socket.get(), message, net::Deadline::after(kSendTimeout));
      if (!sent.ok()) spdlog::warn("coordinator: cannot send rank {} its assignment", member->rank);
    }
    formed_ = true;
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
    for (const auto& other : pending_) {
      if (other == member) continue;
      (void)net::send_message(other->socket.get(), message, net::Deadline::after(kSendTimeout));
    }
  }

  const CoordinatorConfig config_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<Member>> pending_;  // every member, sorted by rank once formed
  bool formed_ = false;
  bool aborted_ = false;
};

}  // namespace

int run_coordinator(const CoordinatorConfig& config) { return Coordinator(config).run(); }

}  // namespace gradsync::daemon
