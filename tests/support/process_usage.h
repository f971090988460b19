// What a running process uses, read from /proc: for tests that a daemon sleeps while idle and
// holds no more than it should.
#pragma once

#include <sys/types.h>

namespace gradsync::testing {

// User plus system CPU time, in clock ticks.
long cpu_ticks(pid_t pid);

int open_descriptors(pid_t pid);

}  // namespace gradsync::testing
