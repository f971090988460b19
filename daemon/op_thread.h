// A worker's op thread: it serves the local clients (client_server.h) and runs their ops
// (op_runner.h) one at a time, and acts on its generations' lives (generation_lifecycle.h): it
// installs a generation once formed, and when the coordinator's channel is lost either lets the
// generation run on while the coordinator is found again or ends it and has the next one formed,
// beside it (generation_former.h). Everything it holds is touched only on that thread; other
// threads reach it only through its public methods, which post to its event loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "daemon/client_server.h"
#include "daemon/coordinator_link.h"
#include "daemon/generation_former.h"
#include "daemon/generation_lifecycle.h"
#include "daemon/op_runner.h"
#include "daemon/worker.h"
#include "net/unique_fd.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

// What the op thread shares with the other threads; each part is safe to use from any thread.
struct WorkerShared {
  engine::AbortSignal& abort;  // raised when the worker stops or the generation ends
  CoordinatorLink& link;
  OpThreadWatch& watch;
  TableGate& table_gate;
  OpTimes& op_times;
  asio::io_context& control_io;  // where the op times are reported from
};

class OpThread {
 public:
  // Runs on `op_io`, which only the op thread runs.
  OpThread(const WorkerConfig& config, asio::io_context& op_io, WorkerShared shared);

  // Any thread's: control channel `channel` was lost.
  void channel_lost(std::uint64_t channel);
  // Any thread's: the op thread answers (OpThreadWatch::alive) once it is free.
  void ping();

  // Run by the thread that becomes the op thread: serves clients on `client_listener` from
  // generation `first` on, with the next ones formed by `former`, until the worker stops or must
  // not go on; returns the worker's exit status.
  int run(Generation first, net::UniqueFd client_listener, GenerationFormer& former);

 private:
  // Makes `formed` the generation the op thread serves.
  void install(Generation formed);
  // Makes channel `channel` the one whose loss the op thread acts on, from now on keeping the
  // generation when only the connection is lost; a loss that came first is acted on now.
  void serve_channel(std::uint64_t channel);
  void on_channel_lost(std::uint64_t channel);
  void take(const LifecycleStep& step);
  // Lets the generation go (the abort says why).
  void end_generation();
  void exit(const std::string& failure);
  // Local rank 0's hello (the server makes the others').
  proto::DaemonHello hello() const;
  // What the worker knows of itself and its group, for `gradsync status`.
  proto::DaemonStatus describe_self() const;

  const WorkerConfig& config_;
  asio::io_context& op_io_;
  const WorkerShared shared_;
  GenerationLifecycle lifecycle_;
  OpRunner runner_;
  std::optional<ClientServer> server_;  // from the first generation on
  GenerationFormer* former_ = nullptr;  // while run() runs
  int exit_status_ = 0;
  std::chrono::steady_clock::time_point serving_since_;
};

}  // namespace gradsync::daemon
