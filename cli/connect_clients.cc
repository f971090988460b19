#include "cli/connect_clients.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <thread>

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
    while (true) {
      try {
        clients.push_back(Client::connect(path, std::chrono::seconds(30), local_rank));
        break;
      } catch (const ClientError& error) {
        // Only a daemon that is not there yet is waited for; one that refused this client, or a
        // socket path that cannot be one, has said its last.
        const bool not_there_yet =
            error.code() == ErrorCode::peer_lost || error.code() == ErrorCode::deadline_exceeded;
        if (!not_there_yet || std::chrono::steady_clock::now() > give_up) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  return clients;
}

}  // namespace gradsync::cli
