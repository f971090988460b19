#include "cli/connect_clients.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "cli/size_list.h"

namespace gradsync::cli {

std::vector<std::string> socket_paths(const std::string& sockets, const std::string& flag) {
  std::vector<std::string> paths;
  for (const std::string_view entry : split_commas(sockets)) {
    if (!entry.empty()) paths.emplace_back(entry);
  }
  if (paths.empty()) {
    throw CLI::ValidationError(flag,
                               "no daemon sockets: give " + flag + " or run under gradsync local");
  }
  return paths;
}

std::vector<Client> connect_clients(const std::vector<std::string>& paths,
                                    std::chrono::milliseconds patience) {
  std::vector<Client> clients;
  const auto give_up = std::chrono::steady_clock::now() + patience;
  for (std::size_t index = 0; index < paths.size(); ++index) {
    const std::string& path = paths[index];
    // A daemon that serves several local ranks is listed once for each, in local-rank order.
    const auto local_rank =
        static_cast<int>(std::count(paths.begin(), paths.begin() + index, path));
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   give_up - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(0));
    clients.push_back(Client::connect(path, ConnectOptions{left, local_rank, {}, {}, {}}));
  }
  return clients;
}

}  // namespace gradsync::cli
