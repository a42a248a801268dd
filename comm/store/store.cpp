// Helpers shared by every Store implementation: duration formatting and the store barrier.
#include "comm/store/store.h"

#include "core/error.h"

namespace ringgrad::comm {

std::string format_duration(Milliseconds d) {
  const int64_t ms = d.count();
  if (ms < 1000 || ms % 1000 != 0) return str_cat(ms, " ms");
  if (ms < 120'000 || ms % 60'000 != 0) return str_cat(ms / 1000, " s");
  return str_cat(ms / 60'000, " min");
}

void throw_store_timeout(const std::string& op, const std::vector<std::string>& missing,
                         Milliseconds timeout, const std::string& where) {
  std::string keys;
  for (const auto& k : missing) keys += (keys.empty() ? "'" : ", '") + k + "'";
  RG_THROW(TimeoutError, "store ", op, " timed out after ", format_duration(timeout),
           " waiting for key", missing.size() == 1 ? " " : "s ", keys,
           where.empty() ? "" : " (store " + where + ")");
}

void store_barrier(Store& store, const std::string& name, int rank, int world,
                   Milliseconds timeout) {
  RG_CHECK(rank >= 0 && rank < world, "store_barrier '", name, "': rank ", rank,
           " is outside world size ", world);
  const std::string base = "barrier/" + name + "/";
  store.set(base + std::to_string(rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(base + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    int arrived = 0;
    for (int r = 0; r < world; ++r) {
      if (store.check({keys[r]}))
        ++arrived;
      else
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    RG_THROW(TimeoutError, "barrier '", name, "': ", arrived, "/", world, " ranks arrived after ",
             format_duration(timeout), "; missing ranks: ", missing);
  }
}

}  // namespace ringgrad::comm
