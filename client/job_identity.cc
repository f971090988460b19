#include "client/job_identity.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace gradsync {

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::mutex names_mutex;

// This process's own job while it has open clients of it, and how many.
struct ProcessJob {
  std::string name;
  int open_clients = 0;
};

ProcessJob& process_job() {
  static ProcessJob job;
  return job;
}

// A job of this process alone: unique among the processes of every host, and among this
// process's own jobs one after another.
std::string new_process_job() {
  static int started = 0;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  return "process " + std::to_string(::getpid()) + " on " + host + " at " +
         std::to_string(now.count()) + " #" + std::to_string(++started);
}

// By job, daemon socket and local rank: the streams opened so far.
std::map<std::string, int>& streams_opened() {
  static std::map<std::string, int> opened;
  return opened;
}

}  // namespace

std::string job_from_environment() {
  if (std::string job = environment("GRADSYNC_JOB"); !job.empty()) return job;
  // torchrun's run id is "none" unless its rendezvous names one; a restart of the job's workers
  // is another job.
  if (const std::string run = environment("TORCHELASTIC_RUN_ID"); !run.empty() && run != "none") {
    return "torchrun " + run + " restart " + environment("TORCHELASTIC_RESTART_COUNT");
  }
  if (const std::string slurm = environment("SLURM_JOB_ID"); !slurm.empty()) {
    return "slurm " + slurm + "." + environment("SLURM_STEP_ID");
  }
  return {};
}

ClientNames::ClientNames(std::string job, std::string stream, const std::string& socket_path,
                         int local_rank)
    : job_(std::move(job)), stream_(std::move(stream)) {
  std::lock_guard lock(names_mutex);
  if (job_.empty()) job_ = job_from_environment();
  if (job_.empty()) {
    ProcessJob& own = process_job();
    if (own.open_clients++ == 0) own.name = new_process_job();
    job_ = own.name;
    holds_process_job_ = true;
  }
  if (stream_.empty()) {
    numbered_ = job_ + '\n' + socket_path + '\n' + std::to_string(local_rank);
    stream_ = std::to_string(streams_opened()[numbered_]++);
  }
}

ClientNames::ClientNames(ClientNames&& other) noexcept
    : job_(std::move(other.job_)),
      stream_(std::move(other.stream_)),
      holds_process_job_(std::exchange(other.holds_process_job_, false)),
      numbered_(std::exchange(other.numbered_, {})) {}

ClientNames& ClientNames::operator=(ClientNames&& other) noexcept {
  if (this != &other) {
    release();
    job_ = std::move(other.job_);
    stream_ = std::move(other.stream_);
    holds_process_job_ = std::exchange(other.holds_process_job_, false);
    numbered_ = std::exchange(other.numbered_, {});
  }
  return *this;
}

ClientNames::~ClientNames() { release(); }

void ClientNames::release() {
  std::lock_guard lock(names_mutex);
  if (!numbered_.empty()) {
    int& opened = streams_opened()[numbered_];
    if (std::to_string(opened - 1) == stream_) --opened;
    numbered_.clear();
  }
  if (holds_process_job_) --process_job().open_clients;
  holds_process_job_ = false;
}

}  // namespace gradsync
