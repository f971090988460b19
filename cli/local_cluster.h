// A coordinator and N workers on loopback, each on an ephemeral port, their client sockets in a
// fresh temporary directory: what `gradsync local` runs and what the cluster tests start.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/child_process.h"
#include "collective/status.h"

namespace gradsync::cli {

struct LocalClusterOptions {
  int workers = 1;
  std::vector<int> local_ranks;   // by worker, its --local-ranks; empty: 1 each
  std::string algorithm;          // empty: auto
  std::size_t segment_bytes = 0;  // 0: the daemon's default
  int spin_us = -1;               // -1: spin_us_for(workers, the CPUs this process may use)
  bool bind_cpus = true;          // worker r runs on CPU r mod n of the n this process may use
  std::string daemon_path;        // empty: gradsyncd beside this executable
  bool verbose = false;           // daemons log to this terminal instead of to files
  std::vector<std::string> coordinator_flags;  // more flags for the coordinator
  std::vector<std::string> worker_flags;       // more flags for every worker
};

class LocalCluster {
 public:
  // Starts everything and waits until every worker serves clients.
  static Status start(const LocalClusterOptions& options, std::unique_ptr<LocalCluster>& cluster);
  ~LocalCluster();

  // By worker.
  const std::vector<std::string>& sockets() const { return sockets_; }
  // By global rank: each worker's socket once for each of its local ranks.
  std::vector<std::string> rank_sockets() const;
  ChildProcess& worker(int rank) { return workers_[rank]; }
  ChildProcess& coordinator() { return coordinator_; }
  // Kills worker `rank` (if it still runs) and starts a replacement with the same flags, which
  // asks for the same rank and serves clients on the same socket once the group has formed again.
  void restart_worker(int rank);
  // Kills the coordinator (if it still runs) and starts it again on the same address, as a
  // supervisor would; returns once it listens.
  Status restart_coordinator();
  const std::string& coordinator_address() const { return coordinator_address_; }
  // The group's secret, for a worker started beside the cluster's.
  std::string secret_file() const { return directory_ + "/group.secret"; }
  std::string log_of_worker(int rank) const;
  std::string log_of_coordinator() const;

 private:
  LocalCluster() = default;
  // Starts the coordinator listening on `listen` (HOST:PORT) and waits until it does.
  Status start_coordinator(const std::string& listen);
  std::string directory_;
  std::vector<std::string> coordinator_argv_;  // but where it listens
  ChildProcess coordinator_;
  std::vector<ChildProcess> workers_;
  std::vector<std::vector<std::string>> worker_argv_;
  std::vector<std::string> sockets_;
  std::vector<int> local_ranks_;  // by worker
  std::string coordinator_address_;
  bool verbose_ = false;
};

// How long workers busy-poll before they block when nobody said: kSpinUsWithOwnCpu while every
// worker can have a CPU of its own, 0 once two must share one. Alone on a CPU, a worker that
// spins answers its peer without the wake-up of a sleeping thread; sharing one, it spins through
// the time slice of the worker it waits for (docs/benchmarks/BENCHMARKS-EXPERIMENTS.md, "Figures
// behind rules in the code").
inline constexpr int kSpinUsWithOwnCpu = 50;
int spin_us_for(int workers, std::size_t cpus);

// The gradsyncd that was built and installed beside the running executable.
std::string daemon_beside_this_executable();

}  // namespace gradsync::cli
