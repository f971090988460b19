#include "config/cli_knobs.h"

#include "collective/algorithms.h"

namespace gradsync::config {

std::vector<std::string> algorithm_choices(std::initializer_list<std::string> first,
                                           std::optional<Collective> collective) {
  std::vector<std::string> choices(first);
  for (const Algorithm algorithm : kAllAlgorithms) {
    if (algorithm == Algorithm::probe) continue;
    if (collective && !supports(*collective, algorithm)) continue;
    choices.emplace_back(name(algorithm));
  }
  return choices;
}

std::string describe_options(const CLI::App& command) {
  std::string text;
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_name() == "--help") continue;
    const std::string value =
        option->count() > 0 ? option->as<std::string>() : option->get_default_str();
    if (!text.empty()) text += ' ';
    // "--spin-us" logs as spin_us=..., a name a reader can search for as one word.
    std::string name = option->get_name();
    name.erase(0, name.find_first_not_of('-'));
    std::replace(name.begin(), name.end(), '-', '_');
    text += name + "=" + (value.empty() ? "(none)" : value);
  }
  return text;
}

}  // namespace gradsync::config
