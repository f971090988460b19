// A worker's channel to its coordinator (daemon/control_channel.h) over a loopback connection:
// until the coordinator has proven itself on it, an abort or a table message is handed to the join
// for its checks, not acted on (a stranger at the coordinator's address could otherwise end, or
// change the table of, a generation that runs on while its coordinator is found again); once
// proven, they are acted on as they come, first those that came since the assignment.
#include "daemon/control_channel.h"

#include <gtest/gtest.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "net/message_stream.h"
#include "net/socket.h"

namespace gradsync::daemon {
namespace {

using namespace std::chrono_literals;

proto::CoordinatorToWorker abort_message() {
  proto::CoordinatorToWorker message;
  message.mutable_abort()->set_generation(5);
  message.mutable_abort()->mutable_reason()->set_code(proto::Status::ABORTED);
  message.mutable_abort()->mutable_reason()->set_message("generation 5 does not run here");
  return message;
}

proto::CoordinatorToWorker table_proposal() {
  proto::CoordinatorToWorker message;
  message.mutable_table_proposal()->set_generation(5);
  message.mutable_table_proposal()->set_version(2);
  return message;
}

// Waits up to five seconds for `condition`.
bool eventually(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class ControlChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    net::HostPort loopback;
    ASSERT_TRUE(net::parse_host_port("127.0.0.1:0", loopback).ok());
    net::UniqueFd listener;
    ASSERT_TRUE(net::listen_tcp(loopback, listener).ok());
    const net::Deadline deadline = net::Deadline::after(5s);
    net::UniqueFd worker_end;
    ASSERT_TRUE(net::connect_tcp(net::local_address(listener.get()), deadline, worker_end).ok());
    ASSERT_TRUE(net::accept_connection(listener.get(), deadline, coordinator_).ok());
    // A generation that runs on while its coordinator is found again: what is at stake.
    channel_.emplace(
        io_, std::move(worker_end), std::chrono::hours(1), abort_, [] {},
        ControlChannel::OnLoss::keep_generation,
        [this](const proto::CoordinatorToWorker& message) {
          std::lock_guard lock(mutex_);
          table_messages_.push_back(message);
        });
    thread_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    channel_.reset();
    work_.reset();
    thread_.join();
  }

  void send(const proto::CoordinatorToWorker& message) {
    ASSERT_TRUE(net::send_message(coordinator_.get(), message, net::Deadline::after(5s)).ok());
  }

  proto::CoordinatorToWorker next() {
    proto::CoordinatorToWorker message;
    const Status status = channel_->next(5000ms, "the test's message", message);
    EXPECT_TRUE(status.ok()) << status.to_string();
    return message;
  }

  std::size_t table_messages() {
    std::lock_guard lock(mutex_);
    return table_messages_.size();
  }

  asio::io_context io_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  engine::AbortSignal abort_;
  net::UniqueFd coordinator_;
  std::optional<ControlChannel> channel_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<proto::CoordinatorToWorker> table_messages_;
};

TEST_F(ControlChannelTest, UntilTheCoordinatorIsProvenItsAbortsAndTableMessagesGoToTheJoin) {
  send(abort_message());
  send(table_proposal());
  EXPECT_TRUE(next().has_abort());
  EXPECT_TRUE(next().has_table_proposal());
  EXPECT_FALSE(abort_.raised()) << "the generation runs on";
  EXPECT_EQ(table_messages(), 0u);

  channel_->proven();
  send(table_proposal());
  EXPECT_TRUE(eventually([&] { return table_messages() == 1; }));
  send(abort_message());
  EXPECT_TRUE(eventually([&] { return abort_.raised(); }));
  EXPECT_EQ(abort_.reason().message(), "generation 5 does not run here");
}

TEST_F(ControlChannelTest, AnAbortThatCameSinceTheAssignmentIsActedOnOnceTheCoordinatorIsProven) {
  proto::CoordinatorToWorker assignment;
  assignment.mutable_assignment()->set_generation(5);
  proto::CoordinatorToWorker plan;
  plan.mutable_plan()->set_generation(5);
  send(assignment);
  send(abort_message());
  send(plan);
  EXPECT_TRUE(next().has_assignment());
  // Most likely the abort waits in line by now; had it not come yet, it is acted on as it comes.
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(abort_.raised());
  channel_->proven();
  EXPECT_TRUE(eventually([&] { return abort_.raised(); }));
  EXPECT_TRUE(next().has_plan()) << "what forms the group stays in line";
  proto::CoordinatorToWorker nothing;
  EXPECT_EQ(channel_->next(5000ms, "more", nothing).message(),
            "generation 5 does not run here (waiting for more)");
}

}  // namespace
}  // namespace gradsync::daemon
