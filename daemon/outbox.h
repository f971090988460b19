// Messages queued for one stream socket and written in order on its event loop. The queue has a
// deadline counted from the last write that the peer took bytes of, and a bound in bytes, so a peer
// that reads nothing fails on its own instead of blocking the loop or growing the queue for ever,
// while one that reads slowly, a large message a piece at a time, is served.
// Used by the coordinator for its members, by a worker for its coordinator and for its clients.
#pragma once

#include <asio/steady_timer.hpp>
#include <asio/buffer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "net/message_stream.h"

namespace gradsync::daemon {

// Bytes of messages one peer may leave unread: a few of the largest there are.
inline constexpr std::size_t kMaxQueuedBytes = 4 * net::kMaxControlMessageBytes;

template <typename Socket>
class Outbox {
 public:
  // Called once, with what went wrong, when the peer takes no bytes for `timeout`, a write fails
  // or the queue outgrows its bound; the owner then closes the socket.
  using Failed = std::function<void(const std::string& why)>;
  // Called after each message is written.
  using Sent = std::function<void()>;

  Outbox(Socket& socket, std::chrono::milliseconds timeout, Failed failed, Sent sent = {})
      : socket_(socket),
        deadline_(socket.get_executor()),
        timeout_(timeout),
        failed_(std::move(failed)),
        sent_(std::move(sent)) {}

  // Queues a framed message (net::frame_message). `owner`, which holds the socket and this
  // outbox, is kept alive until the writes are done.
  void push(std::string framed, const std::shared_ptr<void>& owner) {
    if (failed_once_) return;
    if (queue_.empty()) {
      // Most messages fit the socket's buffer: written at once, they need no timer and no handler
      // (which cost a small op a few microseconds).
      if (!write_now(framed)) return;
      if (framed.empty()) {
        if (sent_) sent_();
        return;
      }
    }
    queued_bytes_ += framed.size();
    if (queued_bytes_ > kMaxQueuedBytes) {
      fail(std::to_string(queued_bytes_) + " bytes of messages left unread");
      return;
    }
    queue_.push_back(std::move(framed));
    if (queue_.size() == 1) {
      taken_at_ = std::chrono::steady_clock::now();
      watch(owner);
      write(owner);
    }
  }

  bool empty() const { return queue_.empty(); }
  bool failed() const { return failed_once_; }

  // Stops the deadline; a write still pending ends when its owner closes the socket.
  void cancel() { deadline_.cancel(); }

 private:
  // Writes what the socket takes without waiting and removes it from `framed`; false when the
  // write failed (the peer has then failed).
  bool write_now(std::string& framed) {
    asio::error_code error;
    if (!socket_.non_blocking()) socket_.non_blocking(true, error);
    const std::size_t written = error ? 0 : socket_.write_some(asio::buffer(framed), error);
    if (error && error != asio::error::would_block) {
      fail("cannot send: " + error.message());
      return false;
    }
    framed.erase(0, written);
    return true;
  }

  // Writes the front message from where the peer's last write left it, as much as the socket
  // takes each time.
  void write(const std::shared_ptr<void>& owner) {
    const std::string& front = queue_.front();
    socket_.async_write_some(
        asio::buffer(front.data() + front_written_, front.size() - front_written_),
        [this, owner](const asio::error_code& error, std::size_t written) {
          if (error == asio::error::operation_aborted || failed_once_) return;
          if (error) {
            fail("cannot send: " + error.message());
            return;
          }
          taken_at_ = std::chrono::steady_clock::now();
          front_written_ += written;
          if (front_written_ < queue_.front().size()) {
            write(owner);
            return;
          }
          front_written_ = 0;
          queued_bytes_ -= queue_.front().size();
          queue_.pop_front();
          if (queue_.empty()) {
            deadline_.cancel();
          } else {
            write(owner);
          }
          if (sent_) sent_();
        });
  }

  // Fails the peer once it has taken no bytes for `timeout_` while messages wait; a wait that
  // wakes after a write took bytes waits again, from that write.
  void watch(const std::shared_ptr<void>& owner) {
    deadline_.expires_at(taken_at_ + timeout_);
    deadline_.async_wait([this, owner](const asio::error_code& error) {
      if (error || failed_once_ || queue_.empty()) return;
      if (std::chrono::steady_clock::now() < taken_at_ + timeout_) {
        watch(owner);
        return;
      }
      fail("no bytes taken for " + std::to_string(timeout_.count()) + " ms");
    });
  }

  void fail(const std::string& why) {
    if (failed_once_) return;
    failed_once_ = true;
    deadline_.cancel();
    failed_(why);
  }

  Socket& socket_;
  asio::steady_timer deadline_;
  const std::chrono::milliseconds timeout_;
  const Failed failed_;
  const Sent sent_;
  std::deque<std::string> queue_;  // front() is being written whenever it is not empty
  std::size_t front_written_ = 0;  // bytes of front() the peer has taken
  std::chrono::steady_clock::time_point taken_at_;  // the last write that took bytes
  std::size_t queued_bytes_ = 0;
  bool failed_once_ = false;
};

}  // namespace gradsync::daemon
