// Checks for numeric flags, shared by the apps: a value that is not a finite number in range
// fails at parse time with one line a person can read ("--lr: must be a finite number >= 0, got
// 'nan'"), where CLI11's own range checks accept NaN and print the limits of double.
#pragma once
#include <CLI/CLI.hpp>
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
// A whole number from `low` to `high`, for integer flags, where CLI11's own conversion error
// ("Could not convert: --node-rank = 2.5") names neither what is wanted nor the range.
inline CLI::Validator whole_number_in(long long low, long long high) {
  const std::string range = "from " + std::to_string(low) + " to " + std::to_string(high);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const size_t first_digit = !text.empty() && text[0] == '-' ? 1 : 0;
        const bool whole = text.size() > first_digit && text.size() <= 18 &&
                           text.find_first_not_of("0123456789", first_digit) == std::string::npos;
        if (!whole || std::stoll(text) < low || std::stoll(text) > high)
          return "must be a whole number " + range + ", got '" + text.substr(0, 24) + "'";
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

// A thread count from 0 to `cap` (kernels::max_num_threads() for the CPU kernels).
inline CLI::Validator thread_count(int cap) {
  const std::string wanted =
      "must be a whole number from 0 to " + std::to_string(cap) + " (4 per core of this machine)";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() < 10 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || std::stol(text) > cap) return wanted + ", got '" + text + "'";
        return "";
      },
      "0 to " + std::to_string(cap));
}

}  // namespace ringgrad::cli
