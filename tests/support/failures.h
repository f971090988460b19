// What went wrong on the threads of a cluster test, one rank per thread: each records its
// failures, and the test expects none once every thread is done, naming the first.
#pragma once

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

namespace gradsync::testing {

class Failures {
 public:
  void record(const std::string& failure) {
    std::lock_guard lock(mutex_);
    failures_.push_back(failure);
  }
  void expect_none() const {
    EXPECT_TRUE(failures_.empty()) << failures_.size() << " failures, first: " << failures_.front();
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> failures_;
};

}  // namespace gradsync::testing
