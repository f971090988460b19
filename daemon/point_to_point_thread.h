// A generation's point-to-point engine (engine/point_to_point.h) on a thread of its own, beside the
// op thread: a send's bytes move, and its receive's ready comes, while the op thread runs a
// collective (or waits for one's local ranks), so no message waits for an op and no op for a
// message. The op thread posts messages and client ends; messages done go back through `done`,
// which the caller hands to its own event loop.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/status.h"
#include "engine/point_to_point.h"
#include "net/unique_fd.h"

namespace gradsync::daemon {

class PointToPointThread {
 public:
  // Called on the engine's thread with the messages done since the last call (on the caller's, for
  // one posted after stop()).
  using Done = std::function<void(std::vector<engine::MessageDone> done)>;

  PointToPointThread(engine::PointToPointOptions options,
                     std::unique_ptr<net::DataChannels> channels, Done done);
  // Fails the messages still in flight with the reason stop() gave (or that the generation ended),
  // and waits for the thread.
  ~PointToPointThread();

  // The op thread's, as are the others: post() and stop() are not ordered across threads.
  void post(engine::PostedMessage message);
  // engine::PointToPointEngine::stream_ended.
  void stream_ended(std::uint64_t job, std::uint64_t stream, std::uint32_t rank,
                    const std::string& why);
  // The messages in flight, and those posted from now on, fail with `why`.
  void stop(const Status& why);

 private:
  using Command = std::function<void(engine::PointToPointEngine&)>;
  void give(Command command);
  void run();

  engine::PointToPointEngine engine_;
  const Done done_;
  net::UniqueFd wake_;  // an eventfd, rung when a command waits
  std::mutex mutex_;    // guards what follows
  std::vector<Command> commands_;
  bool stopping_ = false;
  Status stopped_why_;
  std::thread thread_;  // last: started once the rest is
};

}  // namespace gradsync::daemon
