// Flags made from the knob table (config/knobs.h) with CLI11, the choices of enum-valued flags
// made from the vocabulary (collective/types.h), and the one-line account of a parsed command that
// the start-up log and --dry-run print.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "collective/types.h"
#include "config/knobs.h"

namespace gradsync::config {

// Adds `knob` as an option of `command` bound to `value`, which starts at the knob's default.
template <typename T>
CLI::Option* add_knob(CLI::App& command, const knobs::Knob<T>& knob, T& value) {
  value = knob.default_value;
  return command.add_option(std::string(knob.flag), value, std::string(knob.help))
      ->envname(std::string(knob.env))
      ->check(CLI::Range(knob.min, knob.max))
      ->capture_default_str();
}

inline CLI::Option* add_knob(CLI::App& command, const knobs::PathKnob& knob, std::string& value) {
  return command.add_option(std::string(knob.flag), value, std::string(knob.help))
      ->envname(std::string(knob.env));
}

// --alpha-us and --beta-us-per-byte (knobs::kAlphaUs, kBetaUsPerByte), each needing the other, as
// finite numbers >= 0. Returns the --alpha-us option: its count says whether a model was given.
CLI::Option* add_network_model(CLI::App& command, double& alpha_us, double& beta_us_per_byte);

// The names of `values` but `except`, as a flag's choices.
template <typename Enum, std::size_t N>
std::vector<std::string> names_of(const Enum (&values)[N],
                                  std::initializer_list<Enum> except = {}) {
  std::vector<std::string> names;
  for (Enum value : values) {
    if (std::find(except.begin(), except.end(), value) == except.end()) {
      names.emplace_back(name(value));
    }
  }
  return names;
}

// The algorithms a client's op may ask for (the workers' link probe is not one), after `first`
// (such as "auto"), restricted to those that run `collective` if given.
std::vector<std::string> algorithm_choices(std::initializer_list<std::string> first,
                                           std::optional<Collective> collective = std::nullopt);

// "name=value ..." for every option of `command`, given or defaulted: what a process runs with.
std::string describe_options(const CLI::App& command);

}  // namespace gradsync::config
