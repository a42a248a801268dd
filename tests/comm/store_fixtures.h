// Test helpers for the store suites: a running TcpStoreServer with clients on it, and a
// check that an exception's message contains given fragments.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"

namespace ringgrad::comm::testing {

inline std::unique_ptr<TcpStore> connect_to(const TcpStoreServer& server,
                                            const std::string& token = "",
                                            int64_t generation = -1) {
  TcpStoreOptions o;
  o.port = server.port();
  o.token = token;
  o.generation = generation;
  o.connect_timeout = Milliseconds(5000);
  return std::make_unique<TcpStore>(o);
}

// Runs `fn`, expects it to throw E, and returns the message for further checks.
template <class E>
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return {};
}

}  // namespace ringgrad::comm::testing
