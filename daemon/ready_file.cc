#include "daemon/ready_file.h"

#include <cstdio>
#include <fstream>

namespace gradsync::daemon {

Status write_ready_file(const std::string& path, const std::string& line) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary);
    file << line << "\n";
    if (!file) return Status(ErrorCode::internal, "cannot write " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return Status(ErrorCode::internal, "cannot rename " + temporary + " to " + path);
  }
  return {};
}

}  // namespace gradsync::daemon
