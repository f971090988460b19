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
  const auto log = [&](const std::string& name) {
    return options.verbose ? std::string() : result->directory_ + "/" + name + ".log";
  };
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
  const std::string& address = result->coordinator_address_;
  const std::vector<int> cpus = net::allowed_cpus();
  result->local_ranks_ = options.local_ranks;
  result->local_ranks_.resize(options.workers, knobs::kLocalRanks.default_value);
  const int ranks = std::accumulate(result->local_ranks_.begin(), result->local_ranks_.end(), 0);
  const int spin_us = options.spin_us >= 0 ? options.spin_us : spin_us_for(ranks, cpus.size());
  for (int rank = 0; rank < options.workers; ++rank) {
    const std::string socket = result->directory_ + "/rank" + std::to_string(rank) + ".sock";
    std::vector<std::string> argv = {
        daemon,          "worker",   "--coordinator", address,  "--listen",
        "127.0.0.1:0",   "--socket", socket,          "--rank", std::to_string(rank),
        "--secret-file", secret};
    if (!options.algorithm.empty()) argv.insert(argv.end(), {"--algorithm", options.algorithm});
    argv.insert(argv.end(), {"--spin-us", std::to_string(spin_us)});
    if (result->local_ranks_[rank] > 1) {
      argv.insert(argv.end(), {"--local-ranks", std::to_string(result->local_ranks_[rank])});
    }
    if (options.segment_bytes > 0) {
      argv.insert(argv.end(), {"--segment-bytes", std::to_string(options.segment_bytes)});
    }
    // More workers than cores is the usual case here; bound, a worker that sleeps and wakes on
    // every message keeps its caches instead of waking on whichever core is idle.
    if (options.bind_cpus && !cpus.empty()) {
      argv.insert(argv.end(), {"--cpus", std::to_string(cpus[rank % cpus.size()])});
    }
    argv.insert(argv.end(), options.worker_flags.begin(), options.worker_flags.end());
    result->workers_.push_back(ChildProcess::start(argv, log("rank" + std::to_string(rank))));
    result->worker_argv_.push_back(std::move(argv));
    result->sockets_.push_back(socket);
  }
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  for (int rank = 0; rank < options.workers; ++rank) {
    const std::string& socket = result->sockets_[rank];
    while (true) {
      if (!result->workers_[rank].running()) {
        return Status(ErrorCode::internal,
                      "worker " + std::to_string(rank) + " exited: " + result->log_of_worker(rank));
      }
      if (std::filesystem::exists(socket)) {
        try {
          Client::connect(socket, std::chrono::seconds(5), 0);
          break;
        } catch (const ClientError&) {
        }
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Status(ErrorCode::deadline_exceeded,
                      "worker " + std::to_string(rank) + " did not start serving clients within " +
                          std::to_string(kStartTimeout.count()) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
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
  worker = ChildProcess::start(
      worker_argv_[rank], verbose_ ? "" : directory_ + "/rank" + std::to_string(rank) + ".log");
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
  return verbose_ ? "(see above)" : read_all(directory_ + "/rank" + std::to_string(rank) + ".log");
}

std::string LocalCluster::log_of_coordinator() const {
  return verbose_ ? "(see above)" : read_all(directory_ + "/coordinator.log");
}

}  // namespace gradsync::cli
