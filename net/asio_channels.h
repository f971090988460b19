// Data channels over the same sockets, moved and waited on through Asio's reactor (epoll): the
// experiment of issue 22, measured against socket_channels.h.
#pragma once

#include <memory>
#include <vector>

#include "net/data_channels.h"
#include "net/unique_fd.h"

namespace gradsync::net {

std::unique_ptr<DataChannels> make_asio_channels(std::vector<UniqueFd> sockets);

}  // namespace gradsync::net
