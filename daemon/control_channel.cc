#include "daemon/control_channel.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "net/message_stream.h"
#include "proto/convert.h"

namespace gradsync::daemon {

ControlChannel::ControlChannel(net::UniqueFd socket, std::chrono::milliseconds heartbeat_interval,
                               engine::AbortSignal& abort)
    : socket_(std::move(socket)), interval_(heartbeat_interval), abort_(abort) {}

void ControlChannel::start() {
  std::thread([self = shared_from_this()] { self->run(); }).detach();
}

Status ControlChannel::send(const proto::WorkerToCoordinator& message) {
  std::lock_guard lock(write_mutex_);
  return net::send_message(socket_.get(), message, net::Deadline::after(interval_));
}

Status ControlChannel::next(std::chrono::milliseconds timeout, const std::string& what,
                            proto::CoordinatorToWorker& message) {
  std::unique_lock lock(mutex_);
  if (!arrived_.wait_for(lock, timeout, [this] { return !forming_.empty() || !lost_.ok(); })) {
    return Status(ErrorCode::deadline_exceeded,
                  "waited " + std::to_string(timeout.count()) + " ms for " + what);
  }
  if (forming_.empty())
    return Status(lost_.code(), lost_.message() + " (waiting for " + what + ")");
  message = std::move(forming_.front());
  forming_.pop_front();
  return {};
}

void ControlChannel::lose(const Status& reason) {
  abort_.raise(reason);
  std::lock_guard lock(mutex_);
  lost_ = reason;
  arrived_.notify_all();
}

void ControlChannel::run() {
  proto::WorkerToCoordinator heartbeat;
  heartbeat.mutable_heartbeat();
  net::MessageReader reader(socket_.get());
  while (true) {
    proto::CoordinatorToWorker message;
    Status status = reader.receive(message, net::Deadline::after(interval_));
    if (status.code() == ErrorCode::deadline_exceeded) {
      status = send(heartbeat);
      if (status.ok()) continue;
    }
    if (!status.ok()) {
      lose(Status(ErrorCode::aborted, "lost the coordinator: " + status.message()));
      return;
    }
    if (message.has_abort()) {
      // A group that is still forming waits for nothing more either.
      lose(from_proto(message.abort().reason()));
      spdlog::warn("the coordinator aborted the group: {}", message.abort().reason().message());
      continue;
    }
    if (message.has_assignment()) {
      heartbeat.mutable_heartbeat()->set_rank(message.assignment().rank());
      heartbeat.mutable_heartbeat()->set_generation(message.assignment().generation());
    }
    std::lock_guard lock(mutex_);
    forming_.push_back(std::move(message));
    arrived_.notify_all();
  }
}

}  // namespace gradsync::daemon
