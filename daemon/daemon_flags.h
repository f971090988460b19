// The command line of gradsyncd, one subcommand each for the coordinator and the worker: their
// flags (every one also read from a GRADSYNC_* variable, the shared ones made from the knob table,
// config/knobs.h), and the checks that turn what was parsed into the daemon's configuration.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "daemon/coordinator.h"
#include "daemon/worker.h"
#include "net/group_secret.h"
#include "net/socket.h"

namespace gradsync::daemon {

// What both subcommands read about trust: the group's secret, or leave to run without one.
struct TrustFlags {
  std::string secret_file;
  bool insecure = false;

  void add_to(CLI::App& command);
  // The group secret of a daemon that listens on `listen`. Without one, it may listen only on
  // loopback, unless the user says --insecure: anyone who reaches the port could join the group.
  // Throws CLI::ValidationError naming the flag that is wrong.
  net::GroupSecret secret_for(const net::HostPort& listen) const;
};

// HOST:PORT, or CLI::ValidationError naming `flag`.
net::HostPort parse_address(const std::string& flag, const std::string& text);

class CoordinatorFlags {
 public:
  explicit CoordinatorFlags(CLI::App& app);
  CLI::App& command() const { return *command_; }
  // The configuration as parsed, but its secret; throws CLI::ValidationError where flags
  // disagree.
  CoordinatorConfig config() const;
  net::GroupSecret secret(const net::HostPort& listen) const { return trust_.secret_for(listen); }

 private:
  CLI::App* command_;
  CLI::Option* alpha_option_ = nullptr;
  std::string listen_;
  int world_size_ = 0;
  int min_workers_ = 0;
  std::string ready_file_;
  double alpha_us_ = 0;
  double beta_us_per_byte_ = 0;
  int heartbeat_timeout_ms_ = 0;
  int calibration_ms_ = 0;
  int explore_every_ = 0;
  std::string start_allreduce_;
  TrustFlags trust_;
};

class WorkerFlags {
 public:
  explicit WorkerFlags(CLI::App& app);
  CLI::App& command() const { return *command_; }
  // The configuration as parsed, but its secret; throws CLI::ValidationError where a value is
  // wrong. The CPUs to run on are not part of it: bind_to_cpus() binds the calling thread, before
  // any other starts, so that every thread of the worker inherits the binding.
  WorkerConfig config() const;
  net::GroupSecret secret(const net::HostPort& listen) const { return trust_.secret_for(listen); }
  void bind_to_cpus() const;

 private:
  CLI::App* command_;
  std::string coordinator_;
  std::string listen_;
  std::string advertise_;
  std::string socket_path_;
  int rank_ = -1;
  std::string algorithm_ = "auto";
  std::size_t segment_bytes_ = 0;
  int join_timeout_ms_ = 0;
  int coordinator_timeout_ms_ = 0;
  bool no_rejoin_ = false;
  int spin_us_ = 0;
  int stall_timeout_ms_ = 0;
  int client_uid_ = 0;
  int client_gid_ = 0;
  int local_ranks_ = 0;
  std::string cpus_;
  TrustFlags trust_;
};

}  // namespace gradsync::daemon
