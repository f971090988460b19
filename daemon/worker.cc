#include "daemon/worker.h"

#include <spdlog/spdlog.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <optional>
#include <thread>

#include "daemon/coordinator_link.h"
#include "daemon/data_mesh.h"
#include "daemon/generation_former.h"
#include "daemon/op_thread.h"
#include "daemon/op_thread_watch.h"
#include "daemon/op_times.h"
#include "daemon/table_gate.h"
#include "daemon/watchdog.h"
#include "engine/abort_signal.h"
#include "net/socket.h"

namespace gradsync::daemon {

namespace {

// The worker's three threads and what they share. The main thread forms the first generation and
// then becomes the op thread (op_thread.h); a second thread runs the control event loop (the
// coordinator's channel, the data port, signals, the watchdog) from start to end; a third forms
// every later generation (generation_former.h). What they share is safe to use from any of them:
// the abort signal, the coordinator link (one mutex), the op thread's watch, the table gate and
// the op times; the rest belongs to one thread, and is reachable only from it.
class Worker {
 public:
  explicit Worker(const WorkerConfig& config)
      : config_(config),
        watch_(config.stall_timeout),
        table_gate_(config.stall_timeout),
        link_(control_io_, config.heartbeat_interval, abort_, table_gate_,
              [this](std::uint64_t channel) { op_thread_.channel_lost(channel); }),
        op_thread_(config_, op_io_,
                   WorkerShared{abort_, link_, watch_, table_gate_, op_times_, control_io_}) {}

  int run() {
    auto keep_running = asio::make_work_guard(control_io_);
    asio::signal_set signals(control_io_, SIGINT, SIGTERM);
    signals.async_wait([this](const asio::error_code& error, int signal) {
      if (!error) stop("stopping on signal " + std::to_string(signal));
    });
    std::thread control_thread([this] { control_io_.run(); });
    const int status = serve();
    keep_running.reset();
    control_io_.stop();
    control_thread.join();
    // They live on control_io_, whose thread has ended.
    watchdog_.reset();
    link_.close();
    return status;
  }

 private:
  // Forms the first generation, then serves clients on the op thread until the worker stops.
  int serve() {
    net::UniqueFd data_listener;
    if (Status status = net::listen_tcp(config_.listen, data_listener); !status.ok()) {
      return link_.exit_status("worker: " + status.message());
    }
    const std::uint16_t data_port_number = net::local_address(data_listener.get()).port;
    // Served from now on: a connection to the data port is read and judged while the group forms.
    DataPort data_port(control_io_, std::move(data_listener), config_.secret);
    GenerationFormer former(config_, link_, data_port, data_port_number, abort_);
    Generation first;
    if (Status status = former.form(-1, first); !status.ok()) {
      return link_.exit_status("worker: " + status.message());
    }
    net::UniqueFd client_listener;
    if (Status status = net::listen_unix(config_.socket_path, client_listener, config_.clients.gid);
        !status.ok()) {
      return link_.exit_status("worker: " + status.message());
    }
    watchdog_.emplace(control_io_, config_.heartbeat_interval, watch_, link_, op_times_,
                      [this] { op_thread_.ping(); });
    return op_thread_.run(std::move(first), std::move(client_listener), former);
  }

  // Ends the worker from the control thread: whatever the main thread waits for ends at once
  // (an op in flight, the op loop, or a step of forming the group), and it returns 0.
  void stop(const std::string& why) {
    link_.stop(Status(ErrorCode::aborted, "the worker is " + why));
    op_io_.stop();
  }

  const WorkerConfig config_;
  asio::io_context control_io_{1};
  asio::io_context op_io_{1};
  engine::AbortSignal abort_;  // raised when the worker stops or the generation ends
  OpThreadWatch watch_;
  TableGate table_gate_;  // where a new table version takes effect
  OpTimes op_times_;      // what auto's ops took, for the coordinator
  CoordinatorLink link_;
  OpThread op_thread_;
  std::optional<Watchdog> watchdog_;  // on the control thread, from the first generation
};

}  // namespace

int run_worker(const WorkerConfig& config) { return Worker(config).run(); }

}  // namespace gradsync::daemon
