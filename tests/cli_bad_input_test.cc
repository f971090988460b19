// Bad command lines for gradsync bench, plan and local, and for gradsyncd: each is refused at once
// with a message naming what is wrong, and nothing starts.
#include <gtest/gtest.h>

#include "support/run_command.h"
#include "support/test_names.h"

namespace gradsync {
namespace {

struct BadCommand {
  std::string command;  // after the program path
  std::string message;
  bool daemon = false;  // gradsyncd rather than gradsync
};

class CliBadInput : public ::testing::TestWithParam<BadCommand> {};

TEST_P(CliBadInput, IsRefusedWithAClearMessage) {
  const BadCommand& bad = GetParam();
  const std::string program = bad.daemon ? GRADSYNC_DAEMON : GRADSYNC_CLI;
  // GRADSYNC_SOCKETS unset, so that no test depends on the caller's environment.
  const auto result =
      testing::run_command("env -u GRADSYNC_SOCKETS " + program + " " + bad.command);
  EXPECT_NE(result.exit_code, 0) << result.out;
  EXPECT_NE((result.err + result.out).find(bad.message), std::string::npos)
      << result.err << result.out;
}

INSTANTIATE_TEST_SUITE_P(
    Commands, CliBadInput,
    ::testing::Values(
        BadCommand{"bench --dry-run",
                   "no daemon sockets: give --sockets or run under gradsync local"},
        BadCommand{"bench --sockets /tmp/x --min-bytes 0 --dry-run",
                   "--min-bytes: '0' is not a size > 0"},
        BadCommand{"bench --sockets /tmp/x --min-bytes 1KiB --max-bytes 4 --dry-run",
                   "--max-bytes: '4' is not a size >= --min-bytes"},
        BadCommand{"bench --sockets /tmp/x --algorithm bruck --dry-run",
                   "--algorithm: bruck cannot run allreduce"},
        BadCommand{"bench --sockets /tmp/x --collective gather --algorithm ring --dry-run",
                   "--algorithm: ring cannot run gather"},
        BadCommand{"bench --sockets /tmp/x --collective barrier", "--collective: barrier not in"},
        BadCommand{"bench --sockets /tmp/x --collective scatter --wire bf16 --dry-run",
                   "--wire: the bench measures a wire type's error on allreduce only"},
        BadCommand{"bench --sockets /tmp/x --root -1", "--root"},
        BadCommand{"bench --sockets /tmp/x --step-factor 1", "--step-factor"},
        BadCommand{"bench --sockets /tmp/x --small-iters 0", "--small-iters: Value 0 not in range"},
        BadCommand{"bench --sockets /tmp/x --op band --dry-run",
                   "--op: band cannot reduce f32 values: the bitwise operators take integers and "
                   "bool only"},
        BadCommand{"bench --sockets /tmp/x --alpha-us 5 --dry-run",
                   "--alpha-us requires --beta-us-per-byte"},
        BadCommand{"plan", "no daemon sockets: give --sockets or run under gradsync local"},
        BadCommand{"plan --sockets /tmp/x --sizes 6",
                   "--sizes: 6 bytes is not a whole number of f32 elements"},
        BadCommand{"plan --sockets /tmp/x --sizes 4,zz", "--sizes: 'zz' is not a size in bytes"},
        BadCommand{"plan --sockets /nonexistent/gs.sock --connect-timeout-ms 0",
                   "cannot connect to /nonexistent/gs.sock"},
        BadCommand{"status", "no daemon sockets: give --sockets or run under gradsync local"},
        BadCommand{"status --sockets /nonexistent/gs.sock --connect-timeout-ms 0",
                   "gradsync status: deadline exceeded: no gradsync daemon served "
                   "/nonexistent/gs.sock within 0 ms of waiting for it (cannot connect to "
                   "/nonexistent/gs.sock"},
        BadCommand{"status --sockets /tmp/x --connect-timeout-ms -1",
                   "--connect-timeout-ms: Value -1 not in range"},
        BadCommand{"local --workers 0", "--workers: Value 0 not in range 1 to 64"},
        BadCommand{"local --workers 2 --segment-bytes 10", "--segment-bytes"},
        BadCommand{"coordinator --listen 127.0.0.1:0 --world-size 0", "--world-size", true},
        BadCommand{"coordinator --listen nowhere --world-size 2", "'nowhere' is not HOST:PORT",
                   true},
        BadCommand{"worker --coordinator 127.0.0.1:99999 --listen 127.0.0.1:0 --socket /tmp/s",
                   "the port must be a number from 0 to 65535", true},
        BadCommand{"worker --coordinator 127.0.0.1:1 --listen 127.0.0.1:0", "--socket is required",
                   true},
        BadCommand{"coordinator --listen 127.0.0.1:0 --world-size 2 --alpha-us 5 --dry-run",
                   "--alpha-us requires --beta-us-per-byte", true},
        BadCommand{"coordinator --listen 127.0.0.1:0 --world-size 2 --calibration-ms -1",
                   "--calibration-ms: Value -1 not in range 0 to 60000", true},
        BadCommand{"--dry-run worker --coordinator 127.0.0.1:1 --listen 127.0.0.1:0 --socket "
                   "/tmp/s --cpus 2-1",
                   "--cpus: '2-1' in CPU list '2-1' is not a CPU number", true},
        BadCommand{"--dry-run worker --coordinator 127.0.0.1:1 --listen 127.0.0.1:0 --socket "
                   "/tmp/s --cpus 0,1023",
                   "--cpus: CPU 1023 is not one this process may use", true},
        BadCommand{"--dry-run", "A subcommand is required", true}),
    // The command line as typed: "gradsync_bench_sockets_tmp_x_step_factor_1".
    [](const ::testing::TestParamInfo<BadCommand>& param_info) {
      const BadCommand& bad = param_info.param;
      return testing::identifier((bad.daemon ? "gradsyncd " : "gradsync ") + bad.command);
    });

}  // namespace
}  // namespace gradsync
