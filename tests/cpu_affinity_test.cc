// CPU lists as taskset writes them, and binding a thread to some of the CPUs it may use.
#include "net/cpu_affinity.h"

#include <gtest/gtest.h>

#include <thread>

namespace gradsync::net {
namespace {

std::vector<int> parsed(std::string_view text) {
  std::vector<int> cpus;
  const Status status = parse_cpu_list(text, cpus);
  EXPECT_TRUE(status.ok()) << text << ": " << status.to_string();
  return cpus;
}

TEST(CpuList, ReadsNumbersAndRangesSortedEachOnce) {
  EXPECT_EQ(parsed("0"), std::vector<int>{0});
  EXPECT_EQ(parsed("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parsed("6,0,2-3"), (std::vector<int>{0, 2, 3, 6}));
  EXPECT_EQ(parsed("1-2,2,1"), (std::vector<int>{1, 2}));
  EXPECT_EQ(parsed("5-5"), std::vector<int>{5});
  EXPECT_EQ(parsed("1023"), std::vector<int>{1023});
}

TEST(CpuList, RefusesWhatIsNotAListAndLeavesTheOutputAlone) {
  for (const char* bad : {"", ",", "0,", ",1", "a", "-1", "1-", "-", "3-1", "1-2-3", " 1", "1 ",
                          "0x1", "1024", "99999999999", "1,,2"}) {
    std::vector<int> cpus = {7};
    const Status status = parse_cpu_list(bad, cpus);
    EXPECT_EQ(status.code(), ErrorCode::invalid_argument) << "'" << bad << "'";
    EXPECT_EQ(cpus, std::vector<int>{7}) << "'" << bad << "'";
  }
  std::vector<int> cpus;
  EXPECT_EQ(parse_cpu_list("0,3-1", cpus).message(),
            "'3-1' in CPU list '0,3-1' is not a CPU number (0-1023) or a range FIRST-LAST");
  EXPECT_EQ(parse_cpu_list("", cpus).message(), "the CPU list is empty");
}

TEST(CpuList, FormatsRunsAsRangesAndReadsBack) {
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({3}), "3");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(format_cpu_list({0, 2, 4, 5}), "0,2,4-5");
  for (const std::vector<int>& cpus : {std::vector<int>{0}, {1, 2}, {0, 2, 3, 6, 7, 8, 1023}}) {
    EXPECT_EQ(parsed(format_cpu_list(cpus)), cpus);
  }
}

TEST(CpuBinding, ABoundThreadRunsOnlyWhereItWasBoundAndOthersAreUntouched) {
  const std::vector<int> before = allowed_cpus();
  ASSERT_FALSE(before.empty());
  std::vector<int> inside;
  std::thread([&] {
    const Status status = bind_thread_to_cpus({before.back()});
    EXPECT_TRUE(status.ok()) << status.to_string();
    inside = allowed_cpus();
  }).join();
  EXPECT_EQ(inside, std::vector<int>{before.back()});
  EXPECT_EQ(allowed_cpus(), before);
}

TEST(CpuBinding, ACpuThisProcessMayNotUseIsRefusedAndNothingChanges) {
  const std::vector<int> before = allowed_cpus();
  std::thread([&] {
    const Status status = bind_thread_to_cpus({before.front(), 1023});
    EXPECT_EQ(status.code(), ErrorCode::invalid_argument);
    EXPECT_EQ(status.message(),
              "CPU 1023 is not one this process may use (" + format_cpu_list(before) + ")");
    EXPECT_EQ(bind_thread_to_cpus({}).message(), "no CPUs to run on");
    EXPECT_EQ(allowed_cpus(), before);
  }).join();
}

}  // namespace
}  // namespace gradsync::net
