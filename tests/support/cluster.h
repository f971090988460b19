// A local cluster for tests (real gradsyncd processes on loopback) and one client per rank, each
// driven by its own thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/local_cluster.h"
#include "client/gradsync_client.h"

namespace gradsync::testing {

struct TestCluster {
  std::unique_ptr<cli::LocalCluster> cluster;
  std::vector<Client> clients;  // clients[r] is rank r, a client of its host's daemon
};

// Starts `workers` daemons (gradsyncd from GRADSYNC_DAEMON, the build's) and connects a client
// for each rank (each daemon's local ranks); fails the current test on error.
TestCluster start_cluster(int workers, const std::string& algorithm = "",
                          std::size_t segment_bytes = 0,
                          const std::vector<std::string>& coordinator_flags = {});
// The same with every option of `gradsync local` (its daemon is the build's).
TestCluster start_cluster(cli::LocalClusterOptions options);

// Daemons serving `local_ranks[h]` ranks on host h, with 64 KiB segments and no calibration (what
// the tests of local ranks check does not depend on the table; timing algorithms only slows them).
TestCluster start_hosts(const std::vector<int>& local_ranks,
                        std::vector<std::string> coordinator_flags = {});

// Runs `body(rank, client)` on one thread per rank and waits for all of them.
void on_every_rank(TestCluster& cluster, const std::function<void(int, Client&)>& body);

// `call` throws a ClientError of `code` whose message holds `text`.
void expect_client_error(const std::function<void()>& call, ErrorCode code,
                         const std::string& text);

// Connects a new client for every rank (the old ones go) and checks that an all-reduce gives every
// rank the right sum: what a test of bad input ends with.
void expect_every_rank_still_serves(TestCluster& cluster);

}  // namespace gradsync::testing
