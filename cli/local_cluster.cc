#include "cli/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>

#include "client/gradsync_client.h"
#include "net/cpu_affinity.h"
#include "net/group_secret.h"

namespace gradsync::cli {

namespace {

constexpr auto kStartTimeout = std::chrono::seconds(30);

std::string read_all(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string worker_log_file(const std::string& directory, int rank) {
  return directory + "/rank" + std::to_string(rank) + ".log";
}

// What every worker's command line shares.
struct WorkerLaunch {
  std::string daemon;
  std::string coordinator;  // its address
  std::string secret_file;
  int spin_us = 0;
  std::vector<int> cpus;  // those this process may use
};

std::vector<std::string> worker_argv(const LocalClusterOptions& options, const WorkerLaunch& launch,
                                     int rank, int local_ranks, const std::string& socket) {
  std::vector<std::string> argv = {launch.daemon,        "worker",        "--coordinator",
                                   launch.coordinator,   "--listen",      "127.0.0.1:0",
                                   "--socket",           socket,          "--rank",
                                   std::to_string(rank), "--secret-file", launch.secret_file};
  if (!options.algorithm.empty()) argv.insert(argv.end(), {"--algorithm", options.algorithm});
  argv.insert(argv.end(), {"--spin-us", std::to_string(launch.spin_us)});
  if (local_ranks > 1) argv.insert(argv.end(), {"--local-ranks", std::to_string(local_ranks)});
  if (options.segment_bytes > 0) {
    argv.insert(argv.end(), {"--segment-bytes", std::to_string(options.segment_bytes)});
  }
  // More workers than cores is the usual case here; bound, a worker that sleeps and wakes on
  // every message keeps its caches instead of waking on whichever core is idle.
  if (options.bind_cpus && !launch.cpus.empty()) {
    argv.insert(argv.end(), {"--cpus", std::to_string(launch.cpus[rank % launch.cpus.size()])});
  }
  argv.insert(argv.end(), options.worker_flags.begin(), options.worker_flags.end());
  return argv;
}

// Returns once worker `rank` of `cluster` accepts a client, or fails if it exits first or
// `deadline` passes.
Status wait_until_serving(LocalCluster& cluster, int rank,
                          std::chrono::steady_clock::time_point deadline) {
  const std::string& socket = cluster.sockets()[rank];
  while (true) {
    if (!cluster.worker(rank).running()) {
      return Status(ErrorCode::internal,
                    "worker " + std::to_string(rank) + " exited: " + cluster.log_of_worker(rank));
    }
    if (std::filesystem::exists(socket)) {
      try {
        Client::connect(socket, std::chrono::seconds(5), 0);
        return {};
      } catch (const ClientError&) {
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(ErrorCode::deadline_exceeded, "worker " + std::to_string(rank) +
                                                      " did not start serving clients within " +
                                                      std::to_string(kStartTimeout.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int spin_us_for(int workers, std::size_t cpus) {
  return static_cast<std::size_t>(workers) <= cpus ? kSpinUsWithOwnCpu : 0;
}

std::string daemon_beside_this_executable() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "gradsyncd").string();
}

Status LocalCluster::start(const LocalClusterOptions& options,
                           std::unique_ptr<LocalCluster>& cluster) {
  std::unique_ptr<LocalCluster> result(new LocalCluster());
  char directory[] = "/tmp/gradsync-local-XXXXXX";
  if (::mkdtemp(directory) == nullptr) {
    return Status(ErrorCode::internal, "cannot create a temporary directory");
  }
  result->directory_ = directory;
  result->verbose_ = options.verbose;
  const std::string daemon =
      options.daemon_path.empty() ? daemon_beside_this_executable() : options.daemon_path;
  // A group of its own: other groups on this machine, whatever ports they reuse, cannot mix
  // with it.
  const std::string secret = result->secret_file();
  if (Status status = net::GroupSecret::create_file(secret); !status.ok()) return status;
  result->coordinator_argv_ = {daemon,          "coordinator",
                               "--world-size",  std::to_string(options.workers),
                               "--secret-file", secret};
  result->coordinator_argv_.insert(result->coordinator_argv_.end(),
                                   options.coordinator_flags.begin(),
                                   options.coordinator_flags.end());
  if (Status status = result->start_coordinator("127.0.0.1:0"); !status.ok()) return status;
  const std::vector<int> cpus = net::allowed_cpus();
  result->local_ranks_ = options.local_ranks;
  result->local_ranks_.resize(options.workers, knobs::kLocalRanks.default_value);
  const int ranks = std::accumulate(result->local_ranks_.begin(), result->local_ranks_.end(), 0);
  const WorkerLaunch launch{
      daemon, result->coordinator_address_, secret,
      options.spin_us >= 0 ? options.spin_us : spin_us_for(ranks, cpus.size()), cpus};
  for (int rank = 0; rank < options.workers; ++rank) {
    const std::string socket = result->directory_ + "/rank" + std::to_string(rank) + ".sock";
    std::vector<std::string> argv =
        worker_argv(options, launch, rank, result->local_ranks_[rank], socket);
    result->workers_.push_back(ChildProcess::start(
        argv, options.verbose ? std::string() : worker_log_file(result->directory_, rank)));
    result->worker_argv_.push_back(std::move(argv));
    result->sockets_.push_back(socket);
  }
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  for (int rank = 0; rank < options.workers; ++rank) {
    if (Status status = wait_until_serving(*result, rank, deadline); !status.ok()) return status;
  }
  cluster = std::move(result);
  return {};
}

Status LocalCluster::start_coordinator(const std::string& listen) {
  const std::string ready = directory_ + "/coordinator.address";
  std::filesystem::remove(ready);
  std::vector<std::string> argv = coordinator_argv_;
  argv.insert(argv.end(), {"--listen", listen, "--ready-file", ready});
  coordinator_ = ChildProcess::start(argv, verbose_ ? "" : directory_ + "/coordinator.log");
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!std::filesystem::exists(ready)) {
    if (!coordinator_.running() || std::chrono::steady_clock::now() > deadline) {
      return Status(ErrorCode::internal, "the coordinator did not start: " + log_of_coordinator());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  coordinator_address_ = read_all(ready);
  coordinator_address_.erase(coordinator_address_.find_last_not_of("\n") + 1);
  return {};
}

Status LocalCluster::restart_coordinator() {
  if (coordinator_.running()) {
    ::kill(coordinator_.pid(), SIGKILL);
    coordinator_.wait();
  }
  return start_coordinator(coordinator_address_);
}

void LocalCluster::restart_worker(int rank) {
  ChildProcess& worker = workers_[rank];
  if (worker.running()) {
    ::kill(worker.pid(), SIGKILL);
    worker.wait();
  }
  worker =
      ChildProcess::start(worker_argv_[rank], verbose_ ? "" : worker_log_file(directory_, rank));
}

LocalCluster::~LocalCluster() {
  for (auto& worker : workers_) worker.stop();
  coordinator_.stop();
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

std::vector<std::string> LocalCluster::rank_sockets() const {
  std::vector<std::string> by_rank;
  for (std::size_t worker = 0; worker < sockets_.size(); ++worker) {
    by_rank.insert(by_rank.end(), local_ranks_[worker], sockets_[worker]);
  }
  return by_rank;
}

std::string LocalCluster::log_of_worker(int rank) const {
  return verbose_ ? "(see above)" : read_all(worker_log_file(directory_, rank));
}

std::string LocalCluster::log_of_coordinator() const {
  return verbose_ ? "(see above)" : read_all(directory_ + "/coordinator.log");
}

}  // namespace gradsync::cli
