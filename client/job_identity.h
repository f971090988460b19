// Which training job a client belongs to, and which of the job's op streams it submits
// (docs/clients.md, "Jobs"): the job from what launched the process when the caller names none,
// and a stream for each client the process opens.
#pragma once

#include <string>

namespace gradsync {

// GRADSYNC_JOB; else torchrun's TORCHELASTIC_RUN_ID with its restart count; else Slurm's
// SLURM_JOB_ID with SLURM_STEP_ID; else empty.
std::string job_from_environment();

// The job and stream names of one open client. A job the caller and the environment leave unnamed
// is this process's alone: from its first open client until its last one closes, so that a
// process that closes every client and starts again is a new job, which nothing of the old one's
// ops can pair with. A stream left unnamed is numbered by the clients the process has opened for
// the job on the same daemon socket and local rank ("0", "1", ...; never one used before): a
// program that opens its clients in the same order on every rank, as training programs do, gets
// the same names on every rank.
class ClientNames {
 public:
  ClientNames() = default;
  ClientNames(std::string job, std::string stream, const std::string& socket_path,
              int local_rank);
  ClientNames(ClientNames&& other) noexcept;
  ClientNames& operator=(ClientNames&& other) noexcept;
  ~ClientNames();

  const std::string& job() const { return job_; }
  const std::string& stream() const { return stream_; }
  // The client is connected: its stream's number stays taken. Until then, the destructor gives
  // it back if no later one was taken, so that a connection retried until the daemon serves
  // takes one number, as on every other rank.
  void keep() { numbered_.clear(); }

 private:
  void release();

  std::string job_;
  std::string stream_;
  bool holds_process_job_ = false;  // one of the open clients of this process's own job
  std::string numbered_;            // the stream counter's key while its number may go back
};

}  // namespace gradsync
