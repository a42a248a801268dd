// Checks for the apps' flags: a value that is not a finite number in range fails at parse time
// with one line a person can read ("--lr: must be a finite number >= 0, got 'nan'"), where
// CLI11's own range checks accept NaN and print the limits of double; a flag with named
// choices is parsed into its enum there (add_choice).
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

#include "core/choices.h"

namespace ringgrad::cli {

// A finite number from `low` to `high` (`low` itself excluded when `low_open`); either limit
// may be infinite, meaning none on that side.
inline CLI::Validator number_in(double low, double high, bool low_open = false) {
  std::ostringstream range;
  range.precision(10);  // 10000000, not 1e+07
  if (std::isinf(high))
    range << (low_open ? "> " : ">= ") << low;
  else if (low_open)
    range << "> " << low << " and <= " << high;
  else
    range << "from " << low << " to " << high;
  const std::string wanted = "must be a finite number " + range.str();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v) || v < low || v > high ||
            (low_open && v == low))
          return wanted + ", got '" + text + "'";
        return "";
      },
      range.str());
}
// A whole number from `low` to `high` (`note` says why, when the limit is not obvious), for
// integer flags: CLI11's own conversion errors name neither what is wanted nor the range
// ("Could not convert: --node-rank = 2.5"; past 2^63 "At Most 1 required but received 2"), and
// it takes -1 for an unsigned flag as 2^64 - 1.
inline CLI::Validator whole_number_in(unsigned long long low, unsigned long long high,
                                      const std::string& note = "") {
  const std::string range = "from " + std::to_string(low) + " to " + std::to_string(high);
  const std::string wanted =
      "must be a whole number " + range + (note.empty() ? "" : " (" + note + ")");
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        unsigned long long v = 0;
        const char* end = text.data() + text.size();
        const auto [stop, ec] = std::from_chars(text.data(), end, v);  // no sign, no spaces
        if (text.empty() || ec != std::errc() || stop != end || v < low || v > high)
          return wanted + ", got '" + text.substr(0, 24) + "'";
        return "";
      },
      range);
}
inline CLI::Validator positive() {
  return number_in(0, std::numeric_limits<double>::infinity(), true);
}
inline CLI::Validator non_negative() {
  return number_in(0, std::numeric_limits<double>::infinity());
}

// Refuses `value` of a flag, saying why: a choice this program leaves out.
inline CLI::Validator refuse(const std::string& value, const std::string& why) {
  return CLI::Validator(
      [=](std::string& text) { return text == value ? "'" + value + "': " + why : std::string(); },
      "");
}

// A flag that takes one of `choices` (core/choices.h) and stores the value it names, so the
// program past the flags holds the enum, not the text. A name outside them fails at parse time
// with the text and the choices ("--amp: 'fp8' is not one of none, fp16 or bf16"); --help shows
// the choices and `value`'s name as the default.
template <class T>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, T& value, const Choices<T>& choices,
                        const std::string& help) {
  const std::string list = choice_list(choices);
  auto* option = app.add_option_function<std::string>(
      flag,
      [&value, choices, flag](const std::string& text) {
        value = choice_value(choices, text, flag);
      },
      list + ": " + help);
  option->check(CLI::Validator(
      [choices, list](std::string& text) -> std::string {
        for (const auto& choice : choices)
          if (choice.first == text) return "";
        return "'" + text + "' is not one of " + list;
      },
      "CHOICE"));
  option->default_str(choice_name(choices, value));
  return option;
}

}  // namespace ringgrad::cli
