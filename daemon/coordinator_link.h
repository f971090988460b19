// A worker's link to its coordinator, the one state its three threads share (the op thread, the
// control thread, the thread that forms generations), all behind one mutex: the control channel of
// the moment, which the forming thread replaces at every join; which channel belongs to the
// generation the op thread serves; whether the worker is stopping. Every method takes the mutex;
// each names the thread that calls it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "collective/status.h"
#include "daemon/control_channel.h"
#include "daemon/op_times.h"
#include "daemon/table_gate.h"
#include "engine/abort_signal.h"
#include "gradsync.pb.h"
#include "net/unique_fd.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

class CoordinatorLink {
 public:
  // Called on the control thread when channel `channel` is lost (ControlChannel's `lost`).
  using Lost = std::function<void(std::uint64_t channel)>;

  // The channels live on `control_io` and beat every `heartbeat_interval`; a new table version's
  // messages go to `table_gate`.
  CoordinatorLink(asio::io_context& control_io, std::chrono::milliseconds heartbeat_interval,
                  engine::AbortSignal& abort, TableGate& table_gate, Lost lost);

  // The forming thread's. Makes `socket` the coordinator's channel, numbered `channel`; the
  // caller may wait on it until it opens another or closes it.
  ControlChannel& open(net::UniqueFd socket, ControlChannel::OnLoss on_loss,
                       std::uint64_t& channel);
  // Closes the channel (at the end, or for the next generation) and, unless the worker is
  // stopping, lowers the abort for the next generation; false when the worker is stopping.
  bool close_for_next_generation();
  // At the end, once every other thread has ended.
  void close();

  // The op thread's. From now on channel `channel`, of the generation it serves (rank `rank` of
  // `world_size` in `generation`), is the one whose loss keeps the generation; true when that
  // channel is lost already.
  bool serve(std::uint64_t channel, int rank, std::uint64_t generation, int world_size);
  // OK while the coordinator is there, else why not (ControlChannel::state).
  Status state(std::chrono::steady_clock::duration& heartbeat_age) const;

  // The control thread's. Sends the op times auto ran since the last report, while the op thread
  // serves the channel's generation.
  void report_op_times(OpTimes& op_times);
  // Leaves the generation the op thread serves, for `why` (its op thread is stuck), once.
  void leave_served_generation(const std::string& why);

  // Any thread's. Ends every wait: the abort is raised for `reason` and the channel interrupted.
  void stop(const Status& reason);
  bool stopping() const;
  // The exit status of a step that failed for `failure`: 0 if it failed because the worker is
  // stopping (no error), else 2 (logged as an error).
  int exit_status(const std::string& failure) const;

 private:
  // A new table version's message from channel `channel`: anything the gate cannot take leaves
  // the generation.
  void on_table_message(std::uint64_t channel, const proto::CoordinatorToWorker& message);
  // Leaves the current channel's generation for `why`, unless it has already.
  void leave(const Status& why);
  bool serving() const;

  asio::io_context& control_io_;
  const std::chrono::milliseconds heartbeat_interval_;
  engine::AbortSignal& abort_;
  TableGate& table_gate_;
  const Lost lost_;

  mutable std::mutex mutex_;
  bool stopping_ = false;
  std::optional<ControlChannel> channel_;
  std::uint64_t channel_serial_ = 0;  // counts the channels
  std::uint64_t left_serial_ = 0;     // the channel this worker left the generation of
  // The channel of the generation the op thread serves, its rank, world size and generation.
  std::uint64_t served_serial_ = 0;
  int served_rank_ = -1;
  int served_world_size_ = 0;
  std::uint64_t served_generation_ = 0;
};

}  // namespace gradsync::daemon
