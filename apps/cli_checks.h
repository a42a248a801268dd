// Checks for numeric flags, shared by the apps: a value that is not a finite number in range
// fails at parse time with one line a person can read ("--lr: must be a finite number >= 0, got
// 'nan'"), where CLI11's own range checks accept NaN and print the limits of double.
#pragma once
#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

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

}  // namespace ringgrad::cli
