#include "support/run_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gradsync::testing {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

CommandResult run_command(const std::string& command) {
  char directory[] = "/tmp/gradsync-command-XXXXXX";
  if (mkdtemp(directory) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::string out = std::string(directory) + "/out";
  const std::string err = std::string(directory) + "/err";
  const int status = std::system((command + " >" + out + " 2>" + err).c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(out);
  result.err = read_file(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  rmdir(directory);
  return result;
}

}  // namespace gradsync::testing
