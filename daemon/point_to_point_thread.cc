#include "daemon/point_to_point_thread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

namespace gradsync::daemon {

namespace {

// How long one wait of the loop lasts at most when nothing happens (a message's deadline or a
// command wakes it earlier).
constexpr auto kIdleWait = std::chrono::seconds(1);

}  // namespace

PointToPointThread::PointToPointThread(engine::PointToPointOptions options,
                                       std::unique_ptr<net::DataChannels> channels, Done done)
    : engine_(std::move(options), std::move(channels)),
      done_(std::move(done)),
      wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      thread_([this] { run(); }) {}

PointToPointThread::~PointToPointThread() {
  stop(Status(ErrorCode::aborted, "the generation ended"));
  thread_.join();
}

void PointToPointThread::give(Command command) {
  {
    std::lock_guard lock(mutex_);
    commands_.push_back(std::move(command));
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void PointToPointThread::post(engine::PostedMessage message) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      done_({{message.id, stopped_why_}});
      return;
    }
  }
  give([message = std::move(message)](engine::PointToPointEngine& engine) mutable {
    engine.post(std::move(message));
  });
}

void PointToPointThread::stream_ended(std::uint64_t job, std::uint64_t stream, std::uint32_t rank,
                                      const std::string& why) {
  give([=](engine::PointToPointEngine& engine) { engine.stream_ended(job, stream, rank, why); });
}

void PointToPointThread::stop(const Status& why) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    stopped_why_ = why;
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void PointToPointThread::run() {
  while (true) {
    // The bell is taken down before the commands are: one rung after this finds its command
    // below, or rings the next wait awake.
    std::uint64_t rung = 0;
    (void)!::read(wake_.get(), &rung, sizeof rung);
    std::vector<Command> commands;
    bool stopping = false;
    Status why;
    {
      std::lock_guard lock(mutex_);
      commands.swap(commands_);
      stopping = stopping_;
      why = stopped_why_;
    }
    for (Command& command : commands) command(engine_);
    if (stopping) {
      engine_.fail_all(why);
      if (auto done = engine_.take_done(); !done.empty()) done_(std::move(done));
      return;
    }
    engine_.progress(wake_.get(), net::Deadline::after(kIdleWait));
    if (auto done = engine_.take_done(); !done.empty()) done_(std::move(done));
  }
}

}  // namespace gradsync::daemon
