// Connects the CLI's commands to the daemons they drive, named by a comma-separated list of unix
// sockets in rank order (gradsync local exports it as GRADSYNC_SOCKETS). A daemon that serves
// several local ranks is listed once for each: its n-th entry connects as its local rank n.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "client/gradsync_client.h"

namespace gradsync::cli {

// The socket paths of `sockets`; throws CLI::ValidationError naming `flag` if there are none.
std::vector<std::string> socket_paths(const std::string& sockets, const std::string& flag);

// Waits for each socket until `patience` has passed in all, since daemons started beside this
// process (containers, scripts) may not serve clients yet; throws ClientError for a daemon that
// cannot be reached in time.
std::vector<Client> connect_clients(const std::vector<std::string>& paths,
                                    std::chrono::milliseconds patience);

}  // namespace gradsync::cli
