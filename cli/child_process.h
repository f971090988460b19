// Child processes of the CLI: started with fork/exec, stopped with SIGTERM and, if they linger,
// SIGKILL.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gradsync::cli {

class ChildProcess {
 public:
  ChildProcess() = default;
  // Starts `argv`; its stdout and stderr go to `log_path` (empty: inherited).
  static ChildProcess start(const std::vector<std::string>& argv, const std::string& log_path,
                            const std::vector<std::string>& extra_environment = {});
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running();
  // Waits for the child to exit; returns its exit status (128 + signal if killed).
  int wait();
  // SIGTERM, then SIGKILL after `grace_ms`; returns the exit status.
  int stop(int grace_ms = 2000);

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

}  // namespace gradsync::cli
