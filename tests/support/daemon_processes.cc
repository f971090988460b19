#include "support/daemon_processes.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace gradsync::testing {

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

std::string log_path(const std::string& name) { return ::testing::TempDir() + "/" + name + ".log"; }

cli::ChildProcess start_coordinator(const std::vector<std::string>& arguments,
                                    const std::string& name, std::string& address) {
  const std::string ready = ::testing::TempDir() + "/" + name + ".address";
  std::filesystem::remove(ready);
  std::filesystem::remove(log_path(name));
  std::vector<std::string> command = {GRADSYNC_DAEMON, "coordinator",  "--listen",
                                      "127.0.0.1:0",   "--ready-file", ready};
  command.insert(command.end(), arguments.begin(), arguments.end());
  cli::ChildProcess process = cli::ChildProcess::start(command, log_path(name));
  for (int waited = 0; !std::filesystem::exists(ready) && waited < 500; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  address = read_file(ready);
  address.erase(address.find_last_not_of('\n') + 1);
  return process;
}

cli::ChildProcess start_worker(const std::string& coordinator,
                               const std::vector<std::string>& arguments, const std::string& name) {
  const std::string socket = ::testing::TempDir() + "/" + name + ".sock";
  std::filesystem::remove(socket);
  std::filesystem::remove(log_path(name));  // a log of an earlier run names other ports
  std::vector<std::string> command = {GRADSYNC_DAEMON, "worker",      "--coordinator", coordinator,
                                      "--listen",      "127.0.0.1:0", "--socket",      socket};
  command.insert(command.end(), arguments.begin(), arguments.end());
  return cli::ChildProcess::start(command, log_path(name));
}

std::string wait_for_log(const std::string& path, const std::regex& pattern) {
  std::smatch match;
  for (int waited = 0; waited < 500; ++waited) {
    const std::string log = read_file(path);
    if (std::regex_search(log, match, pattern)) return match[1].str();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "no match in " << path << ":\n" << read_file(path);
  return "";
}

}  // namespace gradsync::testing
