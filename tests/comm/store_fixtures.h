// Test helpers for the store suites: a running TcpStoreServer with clients on it, and a
// check that an exception's message contains given fragments.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>

#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"
#include "tests/message_of.h"

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

using ringgrad::testing::message_of;

}  // namespace ringgrad::comm::testing
