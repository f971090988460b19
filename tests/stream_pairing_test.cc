// Which ops of a daemon's local ranks run together (daemon/stream_pairing.h), driven with a fake
// clock and no sockets: ops pair by their place in each local rank's stream, whatever order they
// come in; a place that a local rank does not reach fails on every rank, at the op's timeout or as
// soon as that rank's client leaves, and the late rank's own op there fails when it comes. A job's
// streams pair each on its own; a daemon serves one job at a time, and keeps nothing of a job once
// its last client has left.
#include "daemon/stream_pairing.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "config/knobs.h"

namespace gradsync::daemon {
namespace {

using std::chrono::milliseconds;

constexpr int kFirstRank = 4;  // the daemon's local rank 0 is rank 4 of the group
constexpr int kHost = 2;

class StreamPairingTest : public ::testing::Test {
 protected:
  // Local rank `local_rank`'s client of `stream` (client id 10 + local rank, pid 100 + local
  // rank, for stream "0" of job "j"; other streams' ids are 20 + local rank) submits the op it
  // names `name`, with `timeout_ms`, as its process's op number `process_order`.
  void submit(int local_rank, const std::string& name, std::uint32_t timeout_ms = 5000,
              const StreamName& stream = {"j", "0"}, std::uint64_t process_order = 0) {
    const ClientId client = (stream == StreamName{"j", "0"} ? 10 : 20) + local_rank;
    ASSERT_TRUE(pairing_.claim(local_rank, client, 100 + local_rank, stream).ok());
    PendingOp op;
    op.client = client;
    op.op.set_name(name);
    op.op.set_timeout_ms(timeout_ms);
    op.op.set_process_order(process_order);
    op.local_rank = local_rank;
    op.key = stream.key(++places_[{client, stream.job}]);
    pairing_.submit(std::move(op));
  }

  // The names of the ops of the actions since the last call: a place that ran as "a+b", with
  // "!" after it if it failed; an op that failed alone as "-a".
  std::vector<std::string> actions() {
    std::vector<std::string> done;
    for (const PairingAction& action : pairing_.take_actions()) {
      if (action.kind == PairingAction::Kind::stream_ended) {
        ended_.push_back(action);
        continue;
      }
      if (action.kind == PairingAction::Kind::fail) {
        done.push_back("-" + action.op.op.name());
        last_failure_ = action.why;
        continue;
      }
      std::string place;
      for (const PendingOp& op : action.place.ops) {
        place += (place.empty() ? "" : "+") + op.op.name();
      }
      if (!action.place.missing.ok()) {
        place += "!";
        last_failure_ = action.place.missing;
      }
      done.push_back(place);
    }
    return done;
  }

  using Done = std::vector<std::string>;

  StreamPairing pairing_{3, kFirstRank, kHost};
  StreamPairing::TimePoint now_ = StreamPairing::TimePoint() + std::chrono::hours(1);
  Status last_failure_;
  std::vector<PairingAction> ended_;  // the stream_ended actions, in order
  std::map<std::pair<ClientId, std::string>, std::uint64_t> places_;  // by client and job
};

TEST_F(StreamPairingTest, OpsRunOnceEveryLocalRankHasReachedTheirPlaceInWhateverOrderTheyCome) {
  submit(2, "c1");
  submit(2, "c2");
  submit(0, "a1");
  EXPECT_EQ(actions(), Done{}) << "local rank 1 has submitted nothing yet";
  submit(1, "b1");
  EXPECT_EQ(actions(), Done{"a1+b1+c1"}) << "by local rank, whichever came first";
  submit(1, "b2");
  submit(0, "a2");
  EXPECT_EQ(actions(), Done{"a2+b2+c2"});
}

TEST_F(StreamPairingTest, APlaceThatALocalRankDoesNotReachInTimeFailsAndItsLateOpFailsToo) {
  submit(0, "a1", 2000);
  submit(1, "b1", 2000);
  pairing_.start_waiting(now_);
  ASSERT_EQ(pairing_.deadline(), now_ + milliseconds(2000));
  pairing_.tick(now_ + milliseconds(1999));
  EXPECT_EQ(actions(), Done{});
  pairing_.tick(now_ + milliseconds(2000));
  EXPECT_EQ(actions(), Done{"a1+b1!"});
  EXPECT_EQ(last_failure_.code(), ErrorCode::deadline_exceeded);
  EXPECT_EQ(last_failure_.message(),
            "op 1 of the streams of host 2: local rank 2 (rank 6) submitted no op within 2000 ms "
            "of the other local ranks");
  EXPECT_FALSE(pairing_.deadline()) << "nothing waits any more";

  // Local rank 2's first op belonged to the place that failed; its second pairs with the others'.
  submit(2, "c1");
  EXPECT_EQ(actions(), Done{"-c1"});
  EXPECT_EQ(last_failure_.code(), ErrorCode::deadline_exceeded);
  EXPECT_NE(last_failure_.message().find("this op's place failed on every rank without it"),
            std::string::npos)
      << last_failure_.message();
  submit(2, "c2");
  submit(1, "b2");
  submit(0, "a2");
  EXPECT_EQ(actions(), Done{"a2+b2+c2"});
}

TEST_F(StreamPairingTest, TheWaitStartsOncePerPlaceAndAnOpWithoutATimeoutWaitsTheDefault) {
  submit(0, "a1", 0);
  pairing_.start_waiting(now_);
  const auto deadline = now_ + milliseconds(knobs::kOpTimeoutMs.default_value);
  EXPECT_EQ(pairing_.deadline(), deadline);
  submit(1, "b1", 0);
  pairing_.start_waiting(now_ + milliseconds(500));
  EXPECT_EQ(pairing_.deadline(), deadline) << "the place has waited since its first op";
}

TEST_F(StreamPairingTest, ALocalRankWhoseClientLeavesFailsThePlaceTheOthersWaitAt) {
  submit(0, "a1");
  submit(1, "b1");
  submit(2, "c1");
  EXPECT_EQ(actions(), Done{"a1+b1+c1"});
  submit(0, "a2");
  submit(1, "b2");
  const std::vector<Leaver> leavers = pairing_.left(12);
  ASSERT_EQ(leavers.size(), 1u);
  EXPECT_EQ(leavers[0].local_rank, 2);
  EXPECT_EQ(leavers[0].pid, 102);
  pairing_.fail_place_left(leavers[0]);
  EXPECT_EQ(actions(), Done{"a2+b2!"});
  EXPECT_EQ(last_failure_.code(), ErrorCode::aborted);
  EXPECT_EQ(last_failure_.message(),
            "op 2 of the streams of host 2: local rank 2 (rank 6) left (its client, pid 102, "
            "went) before submitting it");

  // The rank's next client starts a stream of its own: nothing is owed from the one that left.
  places_[{12, "j"}] = 0;
  submit(2, "c'1");
  submit(1, "b3");
  submit(0, "a3");
  EXPECT_EQ(actions(), Done{"a3+b3+c'1"});
}

TEST_F(StreamPairingTest, AClientThatLeavesAfterSubmittingItsOpHoldsNobodyUp) {
  submit(0, "a1");
  submit(1, "b1");
  EXPECT_TRUE(pairing_.left(11).empty()) << "its op is in";
  submit(2, "c1");
  EXPECT_EQ(actions(), Done{"a1+b1+c1"}) << "and runs with the others'";
}

TEST_F(StreamPairingTest, ALeaversPlaceDoesNotFailOnceAnotherClientHasTakenItsRank) {
  ASSERT_TRUE(pairing_.claim(2, 12, 102, {"j", "0"}).ok());
  submit(0, "a1");
  const std::vector<Leaver> gone = pairing_.left(12);
  ASSERT_EQ(gone.size(), 1u);
  ASSERT_TRUE(pairing_.claim(2, 99, 199, {"j", "0"}).ok())
      << "a new client, before the failure is due";
  pairing_.fail_place_left(gone[0]);
  EXPECT_EQ(actions(), Done{});
}

TEST_F(StreamPairingTest, ASecondClientOfALocalRankInOneStreamIsRefusedNamingTheFirst) {
  const StreamName stream{"j", "0"};
  ASSERT_TRUE(pairing_.claim(1, 7, 700, stream).ok());
  EXPECT_TRUE(pairing_.claim(1, 7, 700, stream).ok()) << "the same client again";
  const Status refused = pairing_.claim(1, 8, 800, stream);
  EXPECT_EQ(refused.code(), ErrorCode::invalid_argument);
  EXPECT_NE(refused.message().find("rank 5 already has a submitting client of stream '0' of job "
                                   "'j' (pid 700, since "),
            std::string::npos)
      << refused.message();
  EXPECT_TRUE(pairing_.claim(1, 8, 800, {"j", "1"}).ok()) << "another stream of the job";
  EXPECT_TRUE(pairing_.left(7).empty());
  EXPECT_TRUE(pairing_.claim(1, 9, 900, stream).ok()) << "once the first has gone";
  EXPECT_EQ(pairing_.job_pid(), 700) << "the job's first client";
}

TEST_F(StreamPairingTest, StreamsOfAJobPairEachByItsOwnPlaces) {
  const StreamName other{"j", "grads"};
  submit(0, "a1");
  submit(0, "x1", 5000, other);
  submit(1, "y1", 5000, other);
  submit(1, "b1");
  submit(2, "c1");
  EXPECT_EQ(actions(), Done{"a1+b1+c1"}) << "stream 0 is complete first";
  submit(2, "z1", 5000, other);
  EXPECT_EQ(actions(), Done{"x1+y1+z1"});
  submit(0, "a2");
  pairing_.start_waiting(now_);
  pairing_.tick(now_ + milliseconds(5000));
  EXPECT_EQ(actions(), Done{"a2!"}) << "a place of one stream fails without touching the other";
}

TEST_F(StreamPairingTest,
       PlacesOfSeveralStreamsCompleteAtOnceRunInTheOrderTheirProcessesSubmitted) {
  // Every local rank's process submitted a1 (its op 1) before x1 (its op 2), but the daemon took
  // them the other way round: a daemon that took them in order must run them in the same order.
  const StreamName other{"j", "grads"};
  for (int local_rank = 0; local_rank < 3; ++local_rank) {
    submit(local_rank, "x1", 5000, other, 2);
  }
  for (int local_rank = 0; local_rank < 3; ++local_rank) {
    submit(local_rank, std::string(1, static_cast<char>('a' + local_rank)) + "1", 5000, {"j", "0"},
           1);
  }
  EXPECT_EQ(actions(), (Done{"a1+b1+c1", "x1+x1+x1"}));
}

TEST_F(StreamPairingTest, AnotherJobIsRefusedNamingTheJobThatHoldsTheDaemonUntilItsClientsLeave) {
  submit(0, "a1");
  submit(1, "b1", 5000, {"j", "grads"});
  const Status refused = pairing_.claim(2, 30, 300, {"k", "0"});
  EXPECT_EQ(refused.code(), ErrorCode::mismatch);
  EXPECT_EQ(refused.message().rfind("rank 6 (host 2) serves job 'j' (its first client: pid 100, "
                                    "since ",
                                    0),
            0u)
      << refused.message();
  EXPECT_NE(refused.message().find("not job 'k' (pid 300)"), std::string::npos)
      << refused.message();
  EXPECT_EQ(pairing_.job(), "j");
  pairing_.left(10);
  EXPECT_FALSE(pairing_.claim(2, 30, 300, {"k", "0"}).ok()) << "job j has a client left";
  pairing_.left(21);
  EXPECT_EQ(pairing_.job(), "");
  EXPECT_TRUE(pairing_.claim(2, 30, 300, {"k", "0"}).ok());
  EXPECT_EQ(pairing_.job(), "k");
}

TEST_F(StreamPairingTest, ALeavingClientEndsItsStreamAndTheLastOneItsJobWithNothingKept) {
  submit(0, "a1");
  submit(1, "b1");
  submit(2, "c1");
  submit(0, "a2");
  EXPECT_EQ(actions(), Done{"a1+b1+c1"});
  pairing_.left(11);
  pairing_.left(12);
  pairing_.left(10);
  EXPECT_EQ(actions(), Done{"a2!"}) << "the place only local rank 0 reached fails with its job";
  ASSERT_EQ(ended_.size(), 3u);
  EXPECT_EQ(ended_[0].kind, PairingAction::Kind::stream_ended);
  EXPECT_EQ(ended_[0].stream, (StreamName{"j", "0"}.key(1))) << "after its op 1";
  EXPECT_EQ(ended_[0].why.message(), "rank 5's client (pid 101) of stream '0' of job 'j' left");
  EXPECT_EQ(pairing_.job(), "") << "the job has no client left";

  // The same job's name again is a new job: its places start at 1, and nothing is owed.
  places_.clear();
  submit(2, "c1");
  submit(1, "b1");
  submit(0, "a1");
  EXPECT_EQ(actions(), Done{"a1+b1+c1"});
}

TEST(StreamNames, TagsAreStableAcrossHostsAndNeverTheDaemonsOwn) {
  EXPECT_EQ(name_tag(""), 0xcbf29ce484222325ull) << "FNV-1a, not a hash that differs by build";
  EXPECT_NE(name_tag("job a"), name_tag("job b"));
  EXPECT_FALSE((StreamName{"j", "0"}.key(1).of_daemon()));
}

TEST_F(StreamPairingTest, ANewGenerationFailsTheOpsThatWaitedAndStartsEveryStreamAgain) {
  submit(0, "a1");
  submit(1, "b1");
  pairing_.start_waiting(now_);
  pairing_.new_generation(10, 5, 8);
  EXPECT_EQ(actions(), (Done{"-a1", "-b1"}));
  EXPECT_EQ(last_failure_.code(), ErrorCode::group_changed);
  EXPECT_EQ(last_failure_.message(),
            "the group moved to generation 8 while this op waited for the other local ranks'");
  EXPECT_FALSE(pairing_.deadline());
  EXPECT_EQ(pairing_.name_of(1), "local rank 1 (rank 11)");

  places_.clear();  // the clients take note of the new generation (ClientSession)
  submit(2, "c1");
  submit(1, "b1");
  pairing_.start_waiting(now_);
  pairing_.tick(now_ + milliseconds(5000));
  EXPECT_EQ(actions(), Done{"b1+c1!"});
  EXPECT_EQ(
      last_failure_.message().rfind("op 1 of the streams of host 5: local rank 0 (rank 10)", 0), 0u)
      << "the streams start at 1 again: " << last_failure_.message();
}

// Ranks 4, 5 and 6 are this daemon's local ranks 0, 1 and 2; rank 9 is on another host.
TEST_F(StreamPairingTest, ASubgroupsStreamWaitsForItsMembersOnlyAndRunsThemInItsOrder) {
  const StreamName tensor_parallel{"j", "tp"};
  const std::vector<int> members = {6, 9, 4};
  ASSERT_TRUE(pairing_.claim(2, 22, 102, tensor_parallel, members).ok());
  ASSERT_TRUE(pairing_.claim(0, 20, 100, tensor_parallel, members).ok());
  submit(0, "a1", 5000, tensor_parallel);
  EXPECT_EQ(actions(), Done{});
  submit(2, "c1", 5000, tensor_parallel);
  const std::vector<PairingAction> taken = pairing_.take_actions();
  ASSERT_EQ(taken.size(), 1u);
  ASSERT_EQ(taken[0].place.ops.size(), 2u) << "local rank 1 is no member: nothing waits for it";
  EXPECT_EQ(taken[0].place.ops[0].op.name(), "c1") << "rank 6 is the subgroup's rank 0";
  EXPECT_EQ(taken[0].place.ops[1].op.name(), "a1");
  EXPECT_EQ(taken[0].place.members, members);
  // The whole group's stream still waits for every local rank.
  submit(0, "a");
  submit(2, "c");
  EXPECT_EQ(actions(), Done{});
  submit(1, "b");
  EXPECT_EQ(actions(), Done{"a+b+c"});
}

TEST_F(StreamPairingTest, AClientOfASubgroupItIsNotInOrThatNamesOtherMembersIsRefused) {
  const StreamName pair{"j", "pair"};
  const Status outsider = pairing_.claim(1, 21, 101, pair, {4, 6});
  EXPECT_EQ(outsider.code(), ErrorCode::invalid_argument);
  EXPECT_NE(outsider.message().find("rank 5 is not a member of subgroup [4, 6]"), std::string::npos)
      << outsider.message();
  ASSERT_TRUE(pairing_.claim(0, 20, 100, pair, {4, 6}).ok());
  const Status other_list = pairing_.claim(2, 22, 102, pair, {6, 4});
  EXPECT_EQ(other_list.code(), ErrorCode::invalid_argument);
  EXPECT_NE(other_list.message().find("rank 6's client names subgroup [6, 4] for stream 'pair' "
                                      "of job 'j', whose other clients here named subgroup [4, 6]"),
            std::string::npos)
      << other_list.message();
  const Status whole = pairing_.claim(2, 22, 102, pair, {});
  EXPECT_NE(whole.message().find("names every rank"), std::string::npos) << whole.message();
  EXPECT_TRUE(pairing_.claim(2, 22, 102, pair, {4, 6}).ok());
}

// A stream's consecutive clients on a local rank are numbered: their ops' keys differ at every
// place, past the end of the job that had them, and the numbers start again in a new generation.
TEST_F(StreamPairingTest, ConsecutiveClientsOfAStreamKeyTheirOpsApart) {
  const StreamName stream{"j", "s"};
  ASSERT_TRUE(pairing_.claim(0, 1, 100, stream).ok());
  const engine::OpKey first = pairing_.key_of(1, 1);
  EXPECT_EQ(first, stream.key(1));
  pairing_.left(1);  // the job's last client here: the job ends
  ASSERT_TRUE(pairing_.claim(0, 2, 101, stream).ok());
  const engine::OpKey second = pairing_.key_of(2, 1);
  EXPECT_TRUE(second.job == first.job && second.place == first.place);
  EXPECT_NE(second.stream, first.stream);
  ASSERT_TRUE(pairing_.claim(1, 3, 102, stream).ok());
  EXPECT_EQ(pairing_.key_of(3, 1), first) << "local rank 1's first client of the stream";
  pairing_.new_generation(kFirstRank, kHost, 2);
  EXPECT_EQ(pairing_.key_of(2, 1), first) << "a client that stays is the generation's first";
  pairing_.left(2);
  ASSERT_TRUE(pairing_.claim(0, 4, 103, stream).ok());
  EXPECT_EQ(pairing_.key_of(4, 1), second);
}

}  // namespace
}  // namespace gradsync::daemon
