#include "collective/check.h"

#include <cstdio>
#include <cstdlib>

namespace gradsync::detail {

void check_failed(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "%s:%d: gradsync invariant broken: %s\n", file, line, message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace gradsync::detail
