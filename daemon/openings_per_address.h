// How many connections from each address a worker's data port is still opening (hello, proofs),
// and a share per address that is not the group's, past which a new one is closed at once: one
// stranger's host cannot hold every descriptor of a worker while its connections wait out their
// deadlines. Until the group's addresses are known every address may open any number: a member's
// connection must not be refused because a stranger on its host got there first.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace gradsync::daemon {

class OpeningsPerAddress : public std::enable_shared_from_this<OpeningsPerAddress> {
 public:
  // One connection being opened; its place is given back when it is destroyed.
  class Opening {
   public:
    Opening(std::shared_ptr<OpeningsPerAddress> owner, std::string address);
    ~Opening();
    Opening(const Opening&) = delete;
    Opening& operator=(const Opening&) = delete;

   private:
    std::shared_ptr<OpeningsPerAddress> owner_;
    std::string address_;
  };

  explicit OpeningsPerAddress(int share) : share_(share) {}

  // From now on, addresses other than these have a share.
  void set_group_addresses(std::set<std::string> addresses);

  // A place for one more opening from `address`, or null once it has its share open.
  std::unique_ptr<Opening> begin(const std::string& address);

 private:
  void end(const std::string& address);

  const int share_;
  std::mutex mutex_;
  std::map<std::string, int> open_;
  std::optional<std::set<std::string>> group_addresses_;
};

}  // namespace gradsync::daemon
