#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace gradsync::net {

namespace {

Status system_error(const std::string& what) {
  return Status(ErrorCode::internal, what + ": " + std::strerror(errno));
}

bool wait_for(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, deadline.poll_timeout_ms());
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return true;  // let the following call report the error
  }
}

HostPort to_host_port(const sockaddr_storage& storage) {
  char host[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET6) {
    const auto& address = reinterpret_cast<const sockaddr_in6&>(storage);
    ::inet_ntop(AF_INET6, &address.sin6_addr, host, sizeof host);
    return {host, ntohs(address.sin6_port)};
  }
  const auto& address = reinterpret_cast<const sockaddr_in&>(storage);
  ::inet_ntop(AF_INET, &address.sin_addr, host, sizeof host);
  return {host, ntohs(address.sin_port)};
}

Status resolve(const HostPort& address, addrinfo*& result, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string port = std::to_string(address.port);
  const int error = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &result);
  if (error != 0) {
    return Status(ErrorCode::invalid_argument,
                  "cannot resolve '" + address.host + "': " + ::gai_strerror(error));
  }
  return {};
}

Status make_unix_address(const std::string& path, sockaddr_un& address) {
  address = {};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    return Status(ErrorCode::invalid_argument, "unix socket path '" + path + "' is longer than " +
                                                   std::to_string(sizeof address.sun_path - 1) +
                                                   " bytes");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size());
  return {};
}

// Connects a non-blocking socket, waiting at most until the deadline. A failure is peer_lost (the
// peer may have yet to start listening) but for EACCES and EPERM, which are `denied`.
Status finish_connect(int fd, const sockaddr* address, socklen_t length, Deadline deadline,
                      int cancel_fd, const std::string& target, ErrorCode denied) {
  const auto failed = [&](int error) {
    const ErrorCode code = error == EACCES || error == EPERM ? denied : ErrorCode::peer_lost;
    return Status(code, "cannot connect to " + target + ": " + std::strerror(error));
  };
  if (::connect(fd, address, length) == 0) return {};
  if (errno != EINPROGRESS && errno != EAGAIN) return failed(errno);
  if (Status status =
          wait_unless_cancelled(fd, POLLOUT, deadline, cancel_fd, "connecting to " + target);
      !status.ok()) {
    return status;
  }
  int error = 0;
  socklen_t size = sizeof error;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
  return error != 0 ? failed(error) : Status();
}

}  // namespace

Status parse_host_port(const std::string& text, HostPort& out) {
  const auto bad = [&](const std::string& why) {
    return Status(ErrorCode::invalid_argument, "'" + text + "' is not HOST:PORT: " + why);
  };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("expected HOST:PORT");
  std::string host = text.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  out = {host, static_cast<std::uint16_t>(std::stoul(port))};
  return {};
}

Status listen_tcp(const HostPort& address, UniqueFd& listener) {
  addrinfo* result = nullptr;
  if (Status status = resolve(address, result, true); !status.ok()) return status;
  Status status(ErrorCode::internal, "no address to listen on for " + address.to_string());
  for (addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    UniqueFd fd(::socket(entry->ai_family, entry->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) continue;
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), entry->ai_addr, entry->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      status = system_error("cannot listen on " + address.to_string());
      continue;
    }
    listener = std::move(fd);
    status = {};
    break;
  }
  ::freeaddrinfo(result);
  return status;
}

HostPort local_address(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof storage;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length);
  return to_host_port(storage);
}

HostPort peer_address(int fd) {
  sockaddr_storage storage{};
  socklen_t length = sizeof storage;
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&storage), &length);
  return to_host_port(storage);
}

Status connect_tcp(const HostPort& address, Deadline deadline, UniqueFd& socket, int cancel_fd) {
  addrinfo* result = nullptr;
  if (Status status = resolve(address, result, false); !status.ok()) return status;
  Status status(ErrorCode::peer_lost, "no address for " + address.to_string());
  for (addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    UniqueFd fd(::socket(entry->ai_family, entry->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) continue;
    // A firewall's refusal (EPERM) may be lifted: retried like any other.
    status = finish_connect(fd.get(), entry->ai_addr, entry->ai_addrlen, deadline, cancel_fd,
                            address.to_string(), ErrorCode::peer_lost);
    if (status.code() == ErrorCode::aborted) break;
    if (status.ok()) {
      socket = std::move(fd);
      break;
    }
  }
  ::freeaddrinfo(result);
  return status;
}

Status connect_tcp_retrying(const HostPort& address, Deadline deadline, UniqueFd& socket,
                            int cancel_fd) {
  while (true) {
    Status status = connect_tcp(address, deadline, socket, cancel_fd);
    if (status.ok() || status.code() == ErrorCode::aborted || deadline.expired()) return status;
    const Deadline pause(std::min(deadline.when(), Clock::now() + std::chrono::milliseconds(20)));
    if (Status waited =
            wait_unless_cancelled(-1, 0, pause, cancel_fd, "connecting to " + address.to_string());
        waited.code() == ErrorCode::aborted) {
      return waited;
    }
  }
}

Status listen_unix(const std::string& path, UniqueFd& listener, int group) {
  sockaddr_un address;
  if (Status status = make_unix_address(path, address); !status.ok()) return status;
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  ::unlink(path.c_str());  // a stale socket file from a daemon that died
  // The file is owner (and group) only from the moment it exists, and handed to the group before
  // anyone can connect (a bound socket refuses connections until listen): another user's process
  // must not hand this daemon tensors or read its results. The mask is the process's; the daemon
  // makes no other file meanwhile.
  const mode_t mask = ::umask(group >= 0 ? 0117 : 0177);
  const int bound = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address);
  const int bind_error = errno;
  ::umask(mask);
  if (bound != 0) {
    errno = bind_error;
    return system_error("cannot listen on unix socket " + path);
  }
  const auto give_up = [&](const std::string& what) {
    const Status status = system_error(what);
    ::unlink(path.c_str());
    return status;
  };
  // Not through a link someone put in the socket's place since.
  if (group >= 0 && ::fchownat(AT_FDCWD, path.c_str(), static_cast<uid_t>(-1),
                               static_cast<gid_t>(group), AT_SYMLINK_NOFOLLOW) != 0) {
    return give_up("cannot hand unix socket " + path + " to group " + std::to_string(group) +
                   " (the daemon's user must be root or in that group)");
  }
  if (::listen(fd.get(), 64) != 0) return give_up("cannot listen on unix socket " + path);
  listener = std::move(fd);
  return {};
}

Status connect_unix(const std::string& path, Deadline deadline, UniqueFd& socket) {
  sockaddr_un address;
  if (Status status = make_unix_address(path, address); !status.ok()) return status;
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  // A socket file this user may not use refuses for good: waiting for the daemon will not help.
  Status status = finish_connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address,
                                 deadline, -1, path, ErrorCode::unauthenticated);
  if (status.ok()) socket = std::move(fd);
  return status;
}

Status accept_connection(int listener, Deadline deadline, UniqueFd& connection) {
  while (true) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      connection.reset(fd);
      return {};
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      return system_error("accept failed");
    }
    if (!wait_for(listener, POLLIN, deadline)) {
      return Status(ErrorCode::deadline_exceeded, "no connection arrived in time");
    }
  }
}

void tune_for_data_plane(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int buffer = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

Status write_all(int fd, std::span<const std::byte> bytes, Deadline deadline) {
  while (!bytes.empty()) {
    const ssize_t written = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (written > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(written));
      continue;
    }
    if (written < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Status(ErrorCode::peer_lost,
                    std::string("connection lost while sending: ") + std::strerror(errno));
    }
    if (!wait_for(fd, POLLOUT, deadline)) {
      return Status(ErrorCode::deadline_exceeded, "sending timed out");
    }
  }
  return {};
}

Status read_exact(int fd, std::span<std::byte> bytes, Deadline deadline) {
  while (!bytes.empty()) {
    const ssize_t got = ::recv(fd, bytes.data(), bytes.size(), 0);
    if (got > 0) {
      bytes = bytes.subspan(static_cast<std::size_t>(got));
      continue;
    }
    if (got == 0) return Status(ErrorCode::peer_lost, "connection closed by the other side");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Status(ErrorCode::peer_lost,
                    std::string("connection lost while receiving: ") + std::strerror(errno));
    }
    if (!wait_for(fd, POLLIN, deadline)) {
      return Status(ErrorCode::deadline_exceeded, "receiving timed out");
    }
  }
  return {};
}

PeerCredentials peer_credentials(int fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return {};
  return {credentials.pid, static_cast<long>(credentials.uid), static_cast<long>(credentials.gid)};
}

bool peer_has_supplementary_group(int fd, int gid) {
  std::vector<gid_t> groups(64);
  auto length = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int result = ::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length);
  if (result != 0 && errno == ERANGE) {  // `length` now says how many there are
    groups.resize(length / sizeof(gid_t));
    result = ::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length);
  }
  if (result != 0) return false;
  groups.resize(length / sizeof(gid_t));
  return std::find(groups.begin(), groups.end(), static_cast<gid_t>(gid)) != groups.end();
}

bool peer_has_closed(int fd) {
  pollfd state{fd, POLLRDHUP, 0};
  return ::poll(&state, 1, 0) == 1 && (state.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

bool is_ipv6_socket(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  return address.ss_family == AF_INET6;
}

Status wait_unless_cancelled(int fd, short events, Deadline deadline, int cancel_fd,
                             const std::string& what) {
  while (true) {
    pollfd entries[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    const int ready = ::poll(entries, cancel_fd >= 0 ? 2 : 1, deadline.poll_timeout_ms());
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return Status(ErrorCode::deadline_exceeded, what + " timed out");
    if (cancel_fd >= 0 && (entries[1].revents & POLLIN)) {
      return Status(ErrorCode::aborted, what + " was cancelled");
    }
    return {};  // ready, or an error that the following call reports
  }
}

bool wait_readable(int fd, Deadline deadline) { return wait_for(fd, POLLIN, deadline); }
bool wait_writable(int fd, Deadline deadline) { return wait_for(fd, POLLOUT, deadline); }

}  // namespace gradsync::net
