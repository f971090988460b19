// gradsyncd processes started one by one, for tests that need what gradsync local does not do
// (a daemon with flags of its own, a stranger beside the group, a worker started later).
#pragma once

#include <regex>
#include <string>
#include <vector>

#include "cli/child_process.h"

namespace gradsync::testing {

std::string read_file(const std::string& path);

// The log and other files of daemon `name` live in the test's temporary directory.
std::string log_path(const std::string& name);

// Starts a coordinator on loopback with `arguments`, waits until it listens, and sets `address`
// to the address it listens on (empty if it never did).
cli::ChildProcess start_coordinator(const std::vector<std::string>& arguments,
                                    const std::string& name, std::string& address);

// Starts a worker of the coordinator at `coordinator` on loopback with `arguments`; its socket
// is `<name>.sock` beside its log.
cli::ChildProcess start_worker(const std::string& coordinator,
                               const std::vector<std::string>& arguments, const std::string& name);

// Waits up to five seconds for `pattern` in the file at `path`; returns its first group, or
// fails the test and returns "".
std::string wait_for_log(const std::string& path, const std::regex& pattern);

}  // namespace gradsync::testing
