#include "daemon/openings_per_address.h"

namespace gradsync::daemon {

OpeningsPerAddress::Opening::Opening(std::shared_ptr<OpeningsPerAddress> owner, std::string address)
    : owner_(std::move(owner)), address_(std::move(address)) {}

OpeningsPerAddress::Opening::~Opening() { owner_->end(address_); }

void OpeningsPerAddress::set_group_addresses(std::set<std::string> addresses) {
  std::lock_guard lock(mutex_);
  group_addresses_ = std::move(addresses);
}

std::unique_ptr<OpeningsPerAddress::Opening> OpeningsPerAddress::begin(const std::string& address) {
  std::lock_guard lock(mutex_);
  int& open = open_[address];
  if (group_addresses_ && group_addresses_->count(address) == 0 && open >= share_) return nullptr;
  ++open;
  return std::make_unique<Opening>(shared_from_this(), address);
}

void OpeningsPerAddress::end(const std::string& address) {
  std::lock_guard lock(mutex_);
  if (--open_[address] == 0) open_.erase(address);
}

}  // namespace gradsync::daemon
