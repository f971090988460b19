#include "cli/local_cluster.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
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
  const std::string ready = result->directory_ + "/coordinator.address";
  // A group of its own: other groups on this machine, whatever ports they reuse, cannot mix
  // with it.
  const std::string secret = result->directory_ + "/group.secret";
  if (Status status = net::GroupSecret::create_file(secret); !status.ok()) return status;
  std::vector<std::string> coordinator_argv = {daemon,          "coordinator",
                                               "--listen",      "127.0.0.1:0",
                                               "--world-size",  std::to_string(options.workers),
                                               "--ready-file",  ready,
                                               "--secret-file", secret};
  coordinator_argv.insert(coordinator_argv.end(), options.coordinator_flags.begin(),
                          options.coordinator_flags.end());
  result->coordinator_ = ChildProcess::start(coordinator_argv, log("coordinator"));
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!std::filesystem::exists(ready)) {
    if (!result->coordinator_.running() || std::chrono::steady_clock::now() > deadline) {
      return Status(ErrorCode::internal,
                    "the coordinator did not start: " + result->log_of_coordinator());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string address = read_all(ready);
  address.erase(address.find_last_not_of("\n") + 1);
  result->coordinator_address_ = address;
  const std::vector<int> cpus = net::allowed_cpus();
  const int spin_us =
      options.spin_us >= 0 ? options.spin_us : spin_us_for(options.workers, cpus.size());
  for (int rank = 0; rank < options.workers; ++rank) {
    const std::string socket = result->directory_ + "/rank" + std::to_string(rank) + ".sock";
    std::vector<std::string> argv = {
        daemon,          "worker",   "--coordinator", address,  "--listen",
        "127.0.0.1:0",   "--socket", socket,          "--rank", std::to_string(rank),
        "--secret-file", secret};
    if (!options.algorithm.empty()) argv.insert(argv.end(), {"--algorithm", options.algorithm});
    argv.insert(argv.end(), {"--spin-us", std::to_string(spin_us)});
    if (options.segment_bytes > 0) {
      argv.insert(argv.end(), {"--segment-bytes", std::to_string(options.segment_bytes)});
    }
    // More workers than cores is the usual case here; bound, a worker that sleeps and wakes on
    // every message keeps its caches instead of waking on whichever core is idle.
    if (options.bind_cpus && !cpus.empty()) {
      argv.insert(argv.end(), {"--cpus", std::to_string(cpus[rank % cpus.size()])});
    }
    result->workers_.push_back(ChildProcess::start(argv, log("rank" + std::to_string(rank))));
    result->sockets_.push_back(socket);
  }
  for (int rank = 0; rank < options.workers; ++rank) {
    const std::string& socket = result->sockets_[rank];
    while (true) {
      if (!result->workers_[rank].running()) {
        return Status(ErrorCode::internal,
                      "worker " + std::to_string(rank) + " exited: " + result->log_of_worker(rank));
      }
      if (std::filesystem::exists(socket)) {
        try {
          Client::connect(socket, std::chrono::seconds(5));
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

LocalCluster::~LocalCluster() {
  for (auto& worker : workers_) worker.stop();
  coordinator_.stop();
  std::error_code ignored;
  std::filesystem::remove_all(directory_, ignored);
}

std::string LocalCluster::log_of_worker(int rank) const {
  return verbose_ ? "(see above)" : read_all(directory_ + "/rank" + std::to_string(rank) + ".log");
}

std::string LocalCluster::log_of_coordinator() const {
  return verbose_ ? "(see above)" : read_all(directory_ + "/coordinator.log");
}

}  // namespace gradsync::cli
