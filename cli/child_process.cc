#include "cli/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

namespace gradsync::cli {

namespace {

int exit_status(int raw) {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return 1;
}

}  // namespace

ChildProcess ChildProcess::start(const std::vector<std::string>& argv, const std::string& log_path,
                                 const std::vector<std::string>& extra_environment) {
  std::vector<char*> arguments;
  for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  ChildProcess child;
  child.pid_ = ::fork();
  if (child.pid_ == 0) {
    // Signals the parent blocks for itself must not stay blocked in the child.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (!log_path.empty()) {
      // Appended to: a daemon started again on the same log goes on after the one before.
      const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log >= 0) {
        ::dup2(log, STDOUT_FILENO);
        ::dup2(log, STDERR_FILENO);
      }
    }
    for (const std::string& entry : extra_environment) ::putenv(const_cast<char*>(entry.c_str()));
    ::execvp(arguments[0], arguments.data());
    std::_Exit(127);
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), status_(other.status_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    stop();
    pid_ = std::exchange(other.pid_, -1);
    status_ = other.status_;
  }
  return *this;
}

ChildProcess::~ChildProcess() { stop(); }

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int raw = 0;
  if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
    status_ = exit_status(raw);
    pid_ = -1;
    return false;
  }
  return true;
}

int ChildProcess::wait() {
  if (pid_ > 0) {
    int raw = 0;
    while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
    }
    status_ = exit_status(raw);
    pid_ = -1;
  }
  return status_;
}

int ChildProcess::stop(int grace_ms) {
  if (!running()) return status_;
  ::kill(pid_, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (running() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (running()) ::kill(pid_, SIGKILL);
  return wait();
}

}  // namespace gradsync::cli
