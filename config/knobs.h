// Every configuration knob that more than one place reads, declared once (docs/architecture.md
// §14): its flag, its GRADSYNC_* environment variable, its default, its range, its help and which
// processes read it. The daemons' and the CLI's flags are made from these entries
// (config/cli_knobs.h), and every default in the code is read from here, never written again.
#pragma once

#include <cstddef>
#include <limits>
#include <string_view>

namespace gradsync::knobs {

// Who reads a knob.
enum Reader : unsigned {
  kCoordinator = 1u << 0,  // gradsyncd coordinator
  kWorker = 1u << 1,       // gradsyncd worker
  kClient = 1u << 2,       // the client library and the commands over it
  kLauncher = 1u << 3,     // gradsync local, which passes it on to its workers
};

template <typename T>
struct Knob {
  std::string_view flag;
  std::string_view env;
  T default_value;
  T min;
  T max;
  std::string_view help;
  unsigned readers;
};

inline constexpr Knob<std::size_t> kSegmentBytes{
    "--segment-bytes",     "GRADSYNC_SEGMENT_BYTES",  std::size_t{1} << 20, 4096,
    std::size_t{64} << 20, "Pipelining segment size", kWorker | kLauncher};
inline constexpr Knob<int> kSpinUs{"--spin-us",
                                   "GRADSYNC_SPIN_US",
                                   0,
                                   0,
                                   100'000,
                                   "Busy-poll this long before blocking: on the network, and "
                                   "on the clients' op queues (a client spins as long)",
                                   kWorker | kLauncher};
inline constexpr Knob<int> kOpTimeoutMs{"--timeout-ms",   "GRADSYNC_TIMEOUT_MS",
                                        60'000,           1,
                                        24 * 3'600'000,   "Deadline of an op, in milliseconds",
                                        kClient | kWorker};
inline constexpr Knob<int> kConnectTimeoutMs{"--connect-timeout-ms",
                                             "GRADSYNC_CONNECT_TIMEOUT_MS",
                                             60'000,
                                             0,
                                             3'600'000,
                                             "How long to wait for the daemons to serve clients",
                                             kClient};
inline constexpr Knob<int> kStallTimeoutMs{
    "--stall-timeout-ms",
    "GRADSYNC_STALL_TIMEOUT_MS",
    5000,
    10,
    600'000,
    "A peer that stops sending in the middle of a frame is lost after this long; so is this "
    "rank when its op thread is this long past an op's deadline, or unresponsive between ops",
    kWorker};
inline constexpr Knob<int> kClientUid{
    "--client-uid",
    "GRADSYNC_CLIENT_UID",
    -1,
    -1,
    std::numeric_limits<int>::max(),
    "Also serve local clients running as this user id (default: only the daemon's own user and "
    "root)",
    kWorker};
inline constexpr Knob<int> kClientGid{
    "--client-gid",
    "GRADSYNC_CLIENT_GID",
    -1,
    -1,
    std::numeric_limits<int>::max(),
    "Hand the client socket to this group (mode 0660) and serve its members; the daemon's user "
    "must be in the group (default: the socket is the daemon user's alone)",
    kWorker};
inline constexpr Knob<int> kLocalRanks{
    "--local-ranks",
    "LOCAL_WORLD_SIZE",
    1,
    1,
    64,
    "Ranks this daemon serves, one client each (LOCAL_RANK): their tensors are reduced in shared "
    "memory before the network",
    kWorker | kLauncher};
inline constexpr Knob<int> kJoinTimeoutMs{"--join-timeout-ms",
                                          "GRADSYNC_JOIN_TIMEOUT_MS",
                                          60'000,
                                          100,
                                          3'600'000,
                                          "Give up if the group has not formed, or a spare has "
                                          "had no word from its coordinator, for this long",
                                          kWorker};
inline constexpr Knob<int> kCoordinatorTimeoutMs{
    "--coordinator-timeout-ms",
    "GRADSYNC_COORDINATOR_TIMEOUT_MS",
    30'000,
    100,
    3'600'000,
    "How long the group runs on without its coordinator while the worker reconnects; then its "
    "ops fail",
    kWorker};
inline constexpr Knob<int> kHeartbeatTimeoutMs{"--heartbeat-timeout-ms",
                                               "GRADSYNC_HEARTBEAT_TIMEOUT_MS",
                                               3000,
                                               100,
                                               600'000,
                                               "A worker silent this long is lost",
                                               kCoordinator};
inline constexpr Knob<int> kCalibrationMs{
    "--calibration-ms",
    "GRADSYNC_CALIBRATION_MS",
    750,
    0,
    60'000,
    "Time (by the measured model) that timing real all-reduce ops may take when the group forms; "
    "0: the table comes from the model alone",
    kCoordinator};
inline constexpr Knob<int> kExploreEvery{
    "--explore-every",
    "GRADSYNC_EXPLORE_EVERY",
    50,
    0,
    1'000'000,
    "Run one all-reduce in this many of a size with a close contender of the table's algorithm, so "
    "that the table learns from real ops (one in a fifth as many where the contender is predicted "
    "faster); 0: never",
    kCoordinator};

// A network model given instead of the measured one (the coordinator's table, the bench's predicted
// column, gradsync model): each needs the other; not given, the measured model is used.
inline constexpr Knob<double> kAlphaUs{
    "--alpha-us",
    "GRADSYNC_ALPHA_US",
    0,
    0,
    std::numeric_limits<double>::max(),
    "Latency per message, in microseconds, of a network model given instead of the measured one "
    "(with --beta-us-per-byte)",
    kCoordinator | kClient};
inline constexpr Knob<double> kBetaUsPerByte{
    "--beta-us-per-byte",
    "GRADSYNC_BETA_US_PER_BYTE",
    0,
    0,
    std::numeric_limits<double>::max(),
    "Transfer time per byte, in microseconds (0.0001 is 10 GB/s), of a network model given "
    "instead of the measured one (with --alpha-us)",
    kCoordinator | kClient};

// A knob whose value is a path; empty: not given.
struct PathKnob {
  std::string_view flag;
  std::string_view env;
  std::string_view help;
  unsigned readers;
};

inline constexpr PathKnob kSecretFile{
    "--secret-file", "GRADSYNC_SECRET_FILE",
    "The group's secret (at least 16 bytes): every coordinator and worker of a group reads the "
    "same, and only they may join or connect",
    kCoordinator | kWorker | kLauncher};

}  // namespace gradsync::knobs
