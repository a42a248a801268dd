// Environment variable helpers.
#include "core/env.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace ringgrad {

std::optional<std::string> env_get(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::string env_str(const char* name, const std::string& fallback) {
  return env_get(name).value_or(fallback);
}

long long env_int(const char* name, long long fallback) {
  auto v = env_get(name);
  if (!v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (*end != '\0') RG_THROW(InvalidArgument, name, "='", *v, "' is not an integer");
  return x;
}

double env_double(const char* name, double fallback) {
  auto v = env_get(name);
  if (!v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (*end != '\0') RG_THROW(InvalidArgument, name, "='", *v, "' is not a number");
  return x;
}

bool env_bool(const char* name, bool fallback) {
  auto v = env_get(name);
  if (!v) return fallback;
  std::string s = *v;
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  RG_THROW(InvalidArgument, name, "='", *v, "' is not a boolean (use 1/0, true/false)");
}

}  // namespace ringgrad
