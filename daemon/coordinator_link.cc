#include "daemon/coordinator_link.h"

#include <spdlog/spdlog.h>

#include "daemon/table_messages.h"

namespace gradsync::daemon {

CoordinatorLink::CoordinatorLink(asio::io_context& control_io,
                                 std::chrono::milliseconds heartbeat_interval,
                                 engine::AbortSignal& abort, TableGate& table_gate, Lost lost)
    : control_io_(control_io),
      heartbeat_interval_(heartbeat_interval),
      abort_(abort),
      table_gate_(table_gate),
      lost_(std::move(lost)) {}

ControlChannel& CoordinatorLink::open(net::UniqueFd socket, ControlChannel::OnLoss on_loss,
                                      std::uint64_t& channel) {
  std::lock_guard lock(mutex_);
  channel = ++channel_serial_;
  channel_.emplace(
      control_io_, std::move(socket), heartbeat_interval_, abort_,
      [this, serial = channel] {
        // An op waiting for a table version's decision waits no more (the op thread's handling
        // of the loss says why).
        table_gate_.cancel();
        lost_(serial);
      },
      on_loss,
      [this, serial = channel](const proto::CoordinatorToWorker& message) {
        on_table_message(serial, message);
      });
  if (stopping_) channel_->interrupt(abort_.reason());
  return *channel_;
}

bool CoordinatorLink::close_for_next_generation() {
  std::lock_guard lock(mutex_);
  channel_.reset();
  if (stopping_) return false;
  abort_.reset();
  return true;
}

void CoordinatorLink::close() {
  std::lock_guard lock(mutex_);
  channel_.reset();
}

bool CoordinatorLink::serve(std::uint64_t channel, int rank, std::uint64_t generation,
                            int world_size) {
  std::lock_guard lock(mutex_);
  served_serial_ = channel;
  served_rank_ = rank;
  served_generation_ = generation;
  served_world_size_ = world_size;
  if (!channel_) return false;
  channel_->keep_generation_when_lost();
  std::chrono::steady_clock::duration unused;
  return !channel_->state(unused).ok();
}

Status CoordinatorLink::state(std::chrono::steady_clock::duration& heartbeat_age) const {
  std::lock_guard lock(mutex_);
  if (!channel_) return Status(ErrorCode::aborted, "the group is re-forming");
  return channel_->state(heartbeat_age);
}

bool CoordinatorLink::serving() const {
  return channel_ && !stopping_ && served_serial_ == channel_serial_;
}

void CoordinatorLink::report_op_times(OpTimes& op_times) {
  std::lock_guard lock(mutex_);
  if (!serving()) return;
  proto::WorkerToCoordinator report;
  if (op_times.take_report(served_generation_, *report.mutable_op_times())) {
    channel_->send(report);
  }
}

void CoordinatorLink::leave_served_generation(const std::string& why) {
  std::lock_guard lock(mutex_);
  // Only a generation the op thread serves is left; one that forms needs no op thread.
  if (!serving() || left_serial_ == channel_serial_) return;
  spdlog::error("worker rank {}: {}; leaving the generation so that the group goes on",
                served_rank_, why);
  left_serial_ = channel_serial_;
  channel_->leave(Status(ErrorCode::aborted, why));
}

void CoordinatorLink::on_table_message(std::uint64_t channel,
                                         const proto::CoordinatorToWorker& message) {
  std::lock_guard lock(mutex_);
  if (!channel_ || channel != channel_serial_ || stopping_) return;
  std::optional<proto::WorkerToCoordinator> reply;
  const Status status = daemon::take_table_message(table_gate_, served_world_size_, message, reply);
  if (reply) channel_->send(*reply);
  if (!status.ok() && left_serial_ != channel_serial_) {
    left_serial_ = channel_serial_;
    spdlog::error("worker rank {}: {}; leaving the generation", served_rank_, status.message());
    channel_->leave(status);
  }
}

void CoordinatorLink::stop(const Status& reason) {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  abort_.raise(reason);  // ops, probing and connecting watch it
  if (channel_) channel_->interrupt(reason);
}

bool CoordinatorLink::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

int CoordinatorLink::exit_status(const std::string& failure) const {
  std::lock_guard lock(mutex_);
  if (stopping_) {
    spdlog::info("worker: {}", abort_.reason().message());
    return 0;
  }
  spdlog::error("{}", failure);
  return 2;
}

}  // namespace gradsync::daemon
