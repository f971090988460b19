// Runs one of the project's programs as a user would, and captures what it printed.
#pragma once

#include <string>

namespace gradsync::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

// Runs `command` through /bin/sh; `command` must already be quoted for the shell.
CommandResult run_command(const std::string& command);

}  // namespace gradsync::testing
