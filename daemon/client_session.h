// One local client's connection to its worker daemon, on the op thread's event loop: the socket
// and the messages read from it, the replies queued to it (a client that does not take them is
// dropped, without stalling anyone's ops), the shared-memory regions it has handed over and its op
// queue (net/op_queue.h), through which its queued ops are answered.
#pragma once

#include <asio/local/stream_protocol.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/outbox.h"
#include "daemon/stream_pairing.h"
#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "net/op_queue.h"
#include "net/shared_memory.h"

namespace gradsync::daemon {

class ClientSession : public std::enable_shared_from_this<ClientSession> {
 public:
  using Socket = asio::local::stream_protocol::socket;
  // Called when the client fails to take its replies.
  using Dropped = std::function<void(ClientSession&, const std::string& why)>;

  // `pid` is the client process's, as the kernel said when it connected.
  ClientSession(Socket socket, ClientId id, int pid, Dropped dropped);

  Socket& socket() { return socket_; }
  ClientId id() const { return id_; }
  int pid() const { return pid_; }

  // The local rank it is, as its hello said (0 until one does).
  int local_rank() const { return local_rank_; }
  void set_local_rank(int local_rank) { local_rank_ = local_rank; }
  // The job and the stream its ops belong to, as its hello said.
  const StreamName& stream() const { return stream_; }
  void set_stream(StreamName stream) { stream_ = std::move(stream); }
  // The subgroup its stream's ops run over, as its hello said; empty: every rank.
  const std::vector<int>& members() const { return members_; }
  void set_members(std::vector<int> members) { members_ = std::move(members); }
  // The generation of the group whose membership the client last took note of (by a hello); its
  // ops' places start again from 1 in a new one.
  std::uint64_t generation() const { return generation_; }
  void note_generation(std::uint64_t generation) {
    if (generation != generation_) places_ = 0;
    generation_ = generation;
  }
  // The place of its next op in its stream: every op of a generation that runs, or that fails on
  // every rank because another job holds the daemon, takes one, so that its places are the same
  // as its stream's on every other rank.
  std::uint64_t take_place() { return ++places_; }

  // Whether the op thread watches its socket for the client's end while one of its ops runs.
  bool hangup_watched() const { return hangup_watched_; }
  void set_hangup_watched() { hangup_watched_ = true; }

  // The next message on the socket, if all of it is there (otherwise deadline_exceeded).
  Status receive(proto::ClientToDaemon& message, net::UniqueFd& attached);
  // Whether messages already read from the socket wait in the reader's buffer.
  bool buffered() const { return reader_.buffered(); }
  std::uint64_t messages_read() const { return messages_read_; }

  // Maps a region the client hands over (`attached` is its descriptor); one that cannot be is
  // logged and left out, and the ops that name it fail with a clear error of their own.
  void attach_region(const proto::AttachRegion& request, net::UniqueFd attached);
  // Maps the connection's op queue; false (logged) when it cannot be: a connection has one, of
  // the layout's size at least.
  bool attach_queue(const proto::AttachRegion& request, net::UniqueFd attached);
  // The region an op names; null for one the client has not handed over.
  std::shared_ptr<net::SharedRegion> region(std::uint64_t region_id) const;
  // Its op queue, once attached.
  net::OpQueueDaemonEnd* queue() { return queue_ ? &*queue_ : nullptr; }

  // Queues a reply; false once the client has failed to take its replies (the session is to
  // end).
  bool reply(const proto::DaemonToClient& message);
  // Answers `op`, one of this client's: through its op queue if it came that way, the reason of
  // a failure on the socket first; otherwise on the socket. False as reply()'s.
  bool answer(const PendingOp& op, const proto::DaemonToClient& message);

  // Closes the connection.
  void close();

 private:
  Socket socket_;
  net::MessageReader reader_;
  const ClientId id_;
  const int pid_;
  const Dropped dropped_;
  Outbox<Socket> outbox_;
  std::map<std::uint64_t, std::shared_ptr<net::SharedRegion>> regions_;
  net::SharedRegion queue_region_;
  std::optional<net::OpQueueDaemonEnd> queue_;
  std::uint64_t messages_read_ = 0;
  int local_rank_ = 0;
  StreamName stream_;
  std::vector<int> members_;
  std::uint64_t generation_ = 0;
  std::uint64_t places_ = 0;
  bool hangup_watched_ = false;
};

// A failed op's reply.
proto::DaemonToClient failure_reply(const PendingOp& op, const Status& why);

}  // namespace gradsync::daemon
