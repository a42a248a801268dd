// JobEvent serialization and the failure summary.
#include "comm/launcher/job_event.h"

#include <ctime>
#include <nlohmann/json.hpp>

#include "comm/store/store.h"
#include "core/error.h"

namespace ringgrad::comm {

std::string now_as_text() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

std::string JobEvent::to_json() const {
  nlohmann::json j = {{"kind", static_cast<int>(kind)},
                      {"node_rank", node_rank},
                      {"hostname", hostname},
                      {"signal", signal},
                      {"detail", detail},
                      {"rank", failure.global_rank},
                      {"local_rank", failure.local_rank},
                      {"pid", failure.pid},
                      {"exit_code", failure.status.code},
                      {"exit_signal", failure.status.signal},
                      {"stop_signal", failure.status.stop_signal},
                      {"stopped_ms", failure.stopped_for.count()},
                      {"time", failure.time},
                      {"stderr_tail", failure.stderr_tail}};
  if (failure.error)
    j["error"] = {{"message", failure.error->message}, {"traceback", failure.error->traceback}};
  return j.dump();
}

JobEvent JobEvent::from_json(const std::string& text) {
  JobEvent e;
  try {
    auto j = nlohmann::json::parse(text);
    e.kind = static_cast<Kind>(j.at("kind").get<int>());
    e.node_rank = j.at("node_rank");
    e.hostname = j.at("hostname");
    e.signal = j.at("signal");
    e.detail = j.at("detail");
    e.failure.global_rank = j.at("rank");
    e.failure.local_rank = j.at("local_rank");
    e.failure.pid = j.at("pid");
    e.failure.status.code = j.at("exit_code");
    e.failure.status.signal = j.at("exit_signal");
    e.failure.status.stop_signal = j.at("stop_signal");
    e.failure.stopped_for = std::chrono::milliseconds(j.at("stopped_ms").get<int64_t>());
    e.failure.time = j.at("time");
    e.failure.stderr_tail = j.at("stderr_tail").get<std::vector<std::string>>();
    if (j.contains("error"))
      e.failure.error = WorkerError{j["error"].at("message").get<std::string>(),
                                    j["error"].at("traceback").get<std::vector<std::string>>()};
  } catch (const nlohmann::json::exception& ex) {
    RG_THROW(Error, "malformed job event in the rendezvous store: ", ex.what());
  }
  return e;
}

std::string format_summary(const JobEvent& e, int64_t generation, int restarts_used) {
  std::string node = str_cat("node ", e.node_rank, " on host ", e.hostname);
  std::string out = str_cat("ringgrad-run: job failed (generation ", generation, ", ",
                            restarts_used, " restart", restarts_used == 1 ? "" : "s", " used)\n");
  switch (e.kind) {
    case JobEvent::Kind::worker_failed: {
      const auto& f = e.failure;
      const std::string pid = f.pid > 0 ? str_cat(", pid ", f.pid) : ", never started";
      const std::string how =
          f.status.stop_signal
              ? str_cat("was ", f.status.describe(), " and not continued within ",
                        format_duration(f.stopped_for), " (frozen: every other rank waits for it)")
              : "ended with " + f.status.describe();
      out += str_cat("  first failure: rank ", f.global_rank, " (local rank ", f.local_rank, ", ",
                     node, pid, ") ", how, " at ", f.time, "\n");
      if (f.error) {
        out += str_cat("  its error file says: ", f.error->message, "\n");
        if (!f.error->traceback.empty())
          out += str_cat("  traceback of rank ", f.global_rank, ":\n");
        for (const auto& line : f.error->traceback) out += "    | " + line + "\n";
      } else if (f.stderr_tail.empty()) {
        out += "  its stderr was empty\n";
      } else {
        out += str_cat("  last ", f.stderr_tail.size(), " stderr line",
                       f.stderr_tail.size() == 1 ? "" : "s", " of rank ", f.global_rank, ":\n");
        for (const auto& line : f.stderr_tail) out += "    | " + line + "\n";
      }
      break;
    }
    case JobEvent::Kind::stopped:
      out += str_cat("  the launcher of ", node, " received ", signal_name(e.signal),
                     " and stopped the job\n");
      break;
    case JobEvent::Kind::node_lost:
      if (e.node_rank < 0)
        out += str_cat("  lost the rendezvous store: ", e.detail, "\n");
      else
        out += str_cat("  lost ", node, ": ", e.detail, "\n");
      break;
  }
  return out;
}

}  // namespace ringgrad::comm
