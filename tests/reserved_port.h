// A TCP port for a test to hand to a store: bound (SO_REUSEADDR), never listening, and held
// until the test process exits. Connects to it are refused and no other program's port-0 bind
// can take it, yet a store, which also sets SO_REUSEADDR, can still listen on it. A port that
// is picked and then released can be taken before the store binds it (it was, in CI).
#pragma once
#include <deque>

#include "comm/launcher/network_probe.h"

namespace ringgrad::testing {

inline int reserved_port() {
  static std::deque<comm::PortReservation> held;
  return held.emplace_back().port();
}

}  // namespace ringgrad::testing
