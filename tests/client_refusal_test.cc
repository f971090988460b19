// Who may use a worker's client socket (daemon/client_acceptor.h): the daemon's own user, root,
// the user and the group it was told to serve (the group's supplementary members too); no process
// with more connections than one may hold. The refusal says why, and how to serve a user.
#include "daemon/client_acceptor.h"

#include <gtest/gtest.h>

namespace gradsync::daemon {
namespace {

constexpr long kDaemonUid = 1000;

net::PeerCredentials peer(long uid, long gid) { return net::PeerCredentials{4242, uid, gid}; }

// Whether the daemon (uid 1000 on host 3) serves `client` when it serves `access`, the client being
// a supplementary member of access.gid when `member`.
Status judge(const net::PeerCredentials& client, net::ClientAccess access, bool member = false,
             long held = 0) {
  return client_refusal(client, access, kDaemonUid, 3, [member] { return member; },
                        [held] { return held; });
}

TEST(ClientRefusal, TheDaemonsUserAndRootAreServed) {
  EXPECT_TRUE(judge(peer(kDaemonUid, 50), {}).ok());
  EXPECT_TRUE(judge(peer(0, 0), {}).ok());
}

TEST(ClientRefusal, AnotherUserIsServedOnlyWhenNamedOrOfTheNamedGroup) {
  const Status refused = judge(peer(2000, 60), {});
  EXPECT_EQ(refused.code(), ErrorCode::unauthenticated);
  EXPECT_EQ(refused.message(),
            "host 3's daemon runs as uid 1000 and serves no client of uid 2000 (pid 4242; "
            "--client-uid names one more user to serve, --client-gid a group)");
  EXPECT_TRUE(judge(peer(2000, 60), {2000, -1}).ok());
  EXPECT_TRUE(judge(peer(2000, 60), {-1, 60}).ok()) << "its group";
  EXPECT_TRUE(judge(peer(2000, 61), {-1, 60}, true).ok()) << "a supplementary member";
  EXPECT_FALSE(judge(peer(2000, 61), {-1, 60}, false).ok());
  EXPECT_FALSE(judge(peer(2001, 60), {2000, -1}).ok());
}

TEST(ClientRefusal, AProcessMayHoldOnlySoManyConnections) {
  EXPECT_TRUE(judge(peer(kDaemonUid, 50), {}, false, kMaxConnectionsPerClient - 1).ok());
  const Status refused = judge(peer(kDaemonUid, 50), {}, false, kMaxConnectionsPerClient);
  EXPECT_EQ(refused.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(refused.message(), "pid 4242 already holds 64 connections to host 3's daemon, as many "
                               "as one process may");
}

}  // namespace
}  // namespace gradsync::daemon
