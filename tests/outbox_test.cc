// The outbox's deadline: a peer that takes a large message a piece at a time, however long the
// whole takes, is served; a peer that stops taking bytes fails, once the deadline has passed
// since the last piece, saying so.
#include "daemon/outbox.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/local/connect_pair.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace gradsync::daemon {
namespace {

using Socket = asio::local::stream_protocol::socket;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = std::chrono::milliseconds(1000);
// Far more than the socket pair holds, so that it is taken in many pieces, and within the bound
// on what may wait.
constexpr std::size_t kMessageBytes = 3 << 20;
static_assert(kMessageBytes < kMaxQueuedBytes);

// One outbox on its own event loop, writing to `writer`; the test reads `reader`.
struct OutboxOnALoop {
  OutboxOnALoop() : writer(io), reader(io) {
    asio::local::connect_pair(writer, reader);
    outbox = std::make_unique<Outbox<Socket>>(writer, kTimeout, [this](const std::string& why) {
      std::lock_guard lock(mutex);
      failure = why;
    });
  }

  ~OutboxOnALoop() {
    io.stop();
    if (loop.joinable()) loop.join();
  }

  void push_and_run(std::string message) {
    asio::post(io, [this, message = std::move(message)]() mutable {
      outbox->push(std::move(message), std::shared_ptr<void>());
    });
    auto work = asio::make_work_guard(io);
    loop = std::thread([this, work = std::move(work)] { io.run(); });
  }

  // Reads up to `bytes` from the reader end, waiting up to a second for them; how many it read.
  std::size_t read_some(std::size_t bytes) {
    pollfd readable{reader.native_handle(), POLLIN, 0};
    if (::poll(&readable, 1, 1000) != 1) return 0;
    std::string buffer(bytes, '\0');
    const ssize_t got = ::read(reader.native_handle(), buffer.data(), buffer.size());
    return got > 0 ? static_cast<std::size_t>(got) : 0;
  }

  std::string failed_with() {
    std::lock_guard lock(mutex);
    return failure;
  }

  asio::io_context io;
  Socket writer;
  Socket reader;
  std::unique_ptr<Outbox<Socket>> outbox;
  std::thread loop;
  std::mutex mutex;
  std::string failure;
};

TEST(Outbox, APeerThatTakesALargeMessageSlowlyIsServed) {
  OutboxOnALoop fixture;
  fixture.push_and_run(std::string(kMessageBytes, 'm'));
  // The whole message takes several deadlines to go through, a piece well within each.
  const auto started = Clock::now();
  std::size_t taken = 0;
  while (taken < kMessageBytes && fixture.failed_with().empty()) {
    taken += fixture.read_some(32 << 10);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(fixture.failed_with(), "");
  EXPECT_EQ(taken, kMessageBytes);
  EXPECT_GT(Clock::now() - started, kTimeout) << "taken at once: the test proves nothing";
}

TEST(Outbox, APeerThatStopsTakingBytesFailsAfterTheDeadline) {
  OutboxOnALoop fixture;
  fixture.push_and_run(std::string(kMessageBytes, 'm'));
  std::size_t taken = 0;
  while (taken < kMessageBytes / 4 && fixture.failed_with().empty()) {
    taken += fixture.read_some(32 << 10);
  }
  const auto stopped = Clock::now();
  while (fixture.failed_with().empty() && Clock::now() - stopped < 30 * kTimeout) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(fixture.failed_with(), "no bytes taken for 1000 ms");
}

}  // namespace
}  // namespace gradsync::daemon
