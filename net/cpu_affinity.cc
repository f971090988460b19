#include "net/cpu_affinity.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace gradsync::net {

namespace {

bool parse_cpu(std::string_view text, int& cpu) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), cpu);
  return error == std::errc() && end == text.data() + text.size() && cpu >= 0 && cpu < CPU_SETSIZE;
}

}  // namespace

Status parse_cpu_list(std::string_view text, std::vector<int>& cpus) {
  std::vector<int> parsed;
  const auto bad = [&](std::string_view entry) {
    // Appended rather than added up: GCC 12 at -O3 takes "'" + std::string(...) for an
    // overlapping copy (-Wrestrict, GCC bug 105329).
    std::string message = "'";
    message.append(entry).append("' in CPU list '").append(text);
    message.append("' is not a CPU number (0-").append(std::to_string(CPU_SETSIZE - 1));
    return Status(ErrorCode::invalid_argument, message.append(") or a range FIRST-LAST"));
  };
  if (text.empty()) return Status(ErrorCode::invalid_argument, "the CPU list is empty");
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = text.substr(start, comma - start);
    const std::size_t dash = entry.find('-');
    int first = 0;
    int last = 0;
    if (dash == std::string_view::npos) {
      if (!parse_cpu(entry, first)) return bad(entry);
      last = first;
    } else if (!parse_cpu(entry.substr(0, dash), first) ||
               !parse_cpu(entry.substr(dash + 1), last) || last < first) {
      return bad(entry);
    }
    for (int cpu = first; cpu <= last; ++cpu) parsed.push_back(cpu);
    start = comma + 1;
  }
  std::sort(parsed.begin(), parsed.end());
  parsed.erase(std::unique(parsed.begin(), parsed.end()), parsed.end());
  cpus = std::move(parsed);
  return {};
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) text += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

Status bind_thread_to_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return Status(ErrorCode::invalid_argument, "no CPUs to run on");
  const std::vector<int> allowed = allowed_cpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
      return Status(ErrorCode::invalid_argument, "CPU " + std::to_string(cpu) +
                                                     " is not one this process may use (" +
                                                     format_cpu_list(allowed) + ")");
    }
    CPU_SET(cpu, &set);
  }
  if (::sched_setaffinity(0, sizeof set, &set) != 0) {
    return Status(ErrorCode::internal, std::string("could not bind to CPUs ") +
                                           format_cpu_list(cpus) + ": " + std::strerror(errno));
  }
  return {};
}

}  // namespace gradsync::net
