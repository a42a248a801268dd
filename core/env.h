// Reading configuration from environment variables, with clear errors for malformed values.
#pragma once
#include <optional>
#include <string>

namespace ringgrad {

std::optional<std::string> env_get(const char* name);  // unset or empty -> nullopt
std::string env_str(const char* name, const std::string& fallback);
long long env_int(const char* name, long long fallback);  // throws InvalidArgument if not a number
double env_double(const char* name, double fallback);
bool env_bool(const char* name, bool fallback);  // 1/0, true/false, yes/no, on/off

}  // namespace ringgrad
