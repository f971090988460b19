#include "config/cli_knobs.h"

#include <cmath>
#include <exception>

#include "collective/algorithms.h"

namespace gradsync::config {

namespace {

// CLI::NonNegativeNumber would print the whole range of a double.
const CLI::Validator kNonNegative(
    [](std::string& text) -> std::string {
      try {
        std::size_t used = 0;
        const double value = std::stod(text, &used);
        if (used == text.size() && value >= 0 && std::isfinite(value)) return {};
      } catch (const std::exception&) {
      }
      return "'" + text + "' is not a number >= 0";
    },
    "NUMBER >= 0");

CLI::Option* add_model_knob(CLI::App& command, const knobs::Knob<double>& knob, double& value) {
  value = knob.default_value;
  return command.add_option(std::string(knob.flag), value, std::string(knob.help))
      ->envname(std::string(knob.env))
      ->check(kNonNegative);
}

}  // namespace

CLI::Option* add_network_model(CLI::App& command, double& alpha_us, double& beta_us_per_byte) {
  CLI::Option* alpha = add_model_knob(command, knobs::kAlphaUs, alpha_us);
  CLI::Option* beta = add_model_knob(command, knobs::kBetaUsPerByte, beta_us_per_byte);
  alpha->needs(beta);
  beta->needs(alpha);
  return alpha;
}

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
