#include "chaos/rank_driver.h"

#include <optional>
#include <thread>
#include <vector>

#include "client/gradsync_client.h"

namespace gradsync::chaos {

namespace {

float term(int rank, std::uint64_t index, std::uint64_t generation) {
  return static_cast<float>((rank + 1) * static_cast<int>(index % 7 + 1) +
                            static_cast<int>(generation));
}

// The all-reduced sum every rank of a group of `world_size` in `generation` must see.
bool right_sum(const std::vector<float>& result, int world_size, std::uint64_t generation) {
  const int ranks_sum = world_size * (world_size + 1) / 2;
  for (std::uint64_t index = 0; index < result.size(); ++index) {
    const float expected = static_cast<float>(ranks_sum * static_cast<int>(index % 7 + 1) +
                                              world_size * static_cast<int>(generation));
    if (result[index] != expected) return false;
  }
  return true;
}

}  // namespace

void drive_rank(int slot, const std::string& socket, std::uint64_t count,
                const std::atomic<bool>& stop, OpJournal& journal) {
  std::optional<Client> client;
  std::vector<float> data(count);
  OpOptions options;
  options.timeout = std::chrono::seconds(20);
  while (!stop) {
    if (!client) {
      try {
        // The replacement of a lost client goes on with the job's one stream, which the other
        // ranks' clients start again in the next generation too.
        client.emplace(Client::connect(socket, ConnectOptions{std::chrono::seconds(1), {}, {},
                                                              "chaos", {}}));
      } catch (const ClientError&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // its replacement forms
      }
      continue;
    }
    const int rank = client->rank();
    const std::uint64_t generation = client->generation();
    for (std::uint64_t index = 0; index < count; ++index)
      data[index] = term(rank, index, generation);
    OpOutcome outcome;
    outcome.began = Clock::now();
    try {
      client->allreduce(data.data(), count, DataType::f32, options);
      outcome.kind = right_sum(data, client->world_size(), generation) ? OpOutcome::Kind::right
                                                                       : OpOutcome::Kind::wrong;
      outcome.ended = Clock::now();
      journal.record(slot, outcome);
      continue;
    } catch (const ClientError& error) {
      outcome.kind = OpOutcome::Kind::failed;
      outcome.ended = Clock::now();
      outcome.code = error.code();
      outcome.error = error.what();
      journal.record(slot, outcome);
    }
    if (outcome.error.find("lost the daemon") != std::string::npos) {
      client.reset();
      continue;
    }
    // Takes note of a new group, or waits while one forms; an op that failed in a group that
    // goes on is tried again after a pause.
    try {
      client->group(std::chrono::seconds(10));
    } catch (const ClientError&) {
      client.reset();
      continue;
    }
    if (client->generation() == generation)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace gradsync::chaos
