// Which CPUs a process or thread runs on. When more ranks than cores share a machine (a local
// cluster, the emulated LAN, containers on one host), a daemon that sleeps and wakes on every
// message is woken on whichever core is idle and loses its caches each time; bound to one core,
// and with its client beside it, it keeps them (docs/benchmarks/BENCHMARKS.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "collective/status.h"

namespace gradsync::net {

// A Linux CPU list, as taskset and /proc/*/status write it: "0", "0-3", "0,2-3,6". `cpus` gets
// the CPUs sorted, each once; the error names the entry that is wrong.
Status parse_cpu_list(std::string_view text, std::vector<int>& cpus);
// The shortest list that parse_cpu_list reads back as `cpus` (sorted, each once): "0-3,6".
std::string format_cpu_list(const std::vector<int>& cpus);

// The CPUs the calling thread may run on, sorted.
std::vector<int> allowed_cpus();

// Restricts the calling thread, and the threads it starts afterwards, to `cpus`; every one of
// them must be among allowed_cpus(), else nothing changes and the error says which is not.
Status bind_thread_to_cpus(const std::vector<int>& cpus);

}  // namespace gradsync::net
