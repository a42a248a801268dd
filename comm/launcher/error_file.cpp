// Reading a worker's error file (PyTorch's @record format; also its newer plain-string message).
#include "comm/launcher/error_file.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ringgrad::comm {

namespace {
constexpr size_t kMaxFileBytes = 1 << 20;  // a traceback, not a log
constexpr size_t kMaxLineChars = 400;
}  // namespace

std::optional<WorkerError> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxFileBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return std::nullopt;
  WorkerError e;
  std::string callstack;
  const auto& m = j["message"];
  if (m.is_string()) {
    e.message = m.get<std::string>();
  } else if (m.is_object() && m.contains("message") && m["message"].is_string()) {
    e.message = m["message"].get<std::string>();
    if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
      const auto& extra = m["extraInfo"];
      if (extra.contains("py_callstack") && extra["py_callstack"].is_string())
        callstack = extra["py_callstack"].get<std::string>();
    }
  } else {
    return std::nullopt;
  }
  std::istringstream lines(callstack);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > kMaxLineChars) line = line.substr(0, kMaxLineChars) + "...";
    e.traceback.push_back(line);
  }
  if (e.traceback.size() > kMaxTracebackLines)
    e.traceback.erase(e.traceback.begin(), e.traceback.end() - kMaxTracebackLines);
  if (e.message.size() > kMaxLineChars * 4)
    e.message = e.message.substr(0, kMaxLineChars * 4) + "...";
  return e;
}

}  // namespace ringgrad::comm
