// Blocking-with-deadline socket helpers over POSIX: every wait polls with the time left, so no
// call waits past its deadline. TCP for the data and control planes, unix sockets for clients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "collective/status.h"
#include "net/deadline.h"
#include "net/unique_fd.h"

namespace gradsync::net {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

// "127.0.0.1:5000", "[::1]:5000" or "localhost:0"; the error says what is wrong.
Status parse_host_port(const std::string& text, HostPort& out);

// Listens on a numeric or resolvable address (port 0: an ephemeral port).
Status listen_tcp(const HostPort& address, UniqueFd& listener);
// The address a listening or connected socket is bound to locally / connected to remotely.
HostPort local_address(int fd);
HostPort peer_address(int fd);
// Who is at the other end of a unix socket, as the kernel says (all -1 if it does not).
struct PeerCredentials {
  int pid = -1;
  long uid = -1;
  long gid = -1;  // its group; the supplementary ones: peer_has_supplementary_group
};
PeerCredentials peer_credentials(int fd);
// Whether `gid` was one of the supplementary groups of the process at the other end of a unix
// socket when it connected.
bool peer_has_supplementary_group(int fd, int gid);
// Whether the other end of a connected socket has closed it (not waiting).
bool peer_has_closed(int fd);
// Whether a socket is bound to an IPv6 address (an event loop adopting it needs the family).
bool is_ipv6_socket(int fd);

// Both give up with ErrorCode::aborted as soon as `cancel_fd` (if >= 0) becomes readable.
Status connect_tcp(const HostPort& address, Deadline deadline, UniqueFd& socket,
                   int cancel_fd = -1);
// Retries connect_tcp until it succeeds or the deadline passes: for a peer that may still be
// starting. Returns the last attempt's error.
Status connect_tcp_retrying(const HostPort& address, Deadline deadline, UniqueFd& socket,
                            int cancel_fd = -1);
// Who may use a daemon's client socket besides the daemon's own user and root: one more user and
// the members of one group (-1: none).
struct ClientAccess {
  int uid = -1;
  int gid = -1;
};
// Only the daemon's user may connect (mode 0600), or also `group`'s members where it is not -1:
// the socket file is then that group's, mode 0660, which the daemon's user may make only as root
// or as a member of the group.
Status listen_unix(const std::string& path, UniqueFd& listener, int group = -1);
Status connect_unix(const std::string& path, Deadline deadline, UniqueFd& socket);

// Waits for a connection; ErrorCode::deadline_exceeded when none arrives in time.
Status accept_connection(int listener, Deadline deadline, UniqueFd& connection);

// Low latency and buffers sized for bulk transfer (a 64 MiB all-reduce should not stall on a
// 200 KiB default window).
void tune_for_data_plane(int fd);
void set_nonblocking(int fd);

Status write_all(int fd, std::span<const std::byte> bytes, Deadline deadline);
Status read_exact(int fd, std::span<std::byte> bytes, Deadline deadline);

// Waits for `events` on `fd` (fd < 0: only for the deadline) unless `cancel_fd` (if >= 0)
// becomes readable first: ErrorCode::deadline_exceeded or ErrorCode::aborted, naming `what`.
Status wait_unless_cancelled(int fd, short events, Deadline deadline, int cancel_fd,
                             const std::string& what);
// Waits until `fd` is readable (writable); false on timeout.
bool wait_readable(int fd, Deadline deadline);
bool wait_writable(int fd, Deadline deadline);

}  // namespace gradsync::net
