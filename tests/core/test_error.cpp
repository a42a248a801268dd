// Tests for core/error.h: where an error was thrown and what it says are kept apart.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"

namespace ringgrad::testing {

TEST_CASE("RG_THROW keeps the location and the message apart, and what() joins them") {
  try {
    RG_THROW(InvalidArgument, "--lr must be positive, got ", -1);
    FAIL("RG_THROW did not throw");
  } catch (const InvalidArgument& e) {
    CHECK(e.message() == "--lr must be positive, got -1");
    CHECK(e.where().find("test_error.cpp:") != std::string::npos);
    CHECK(std::string(e.what()) == "[" + e.where() + "] " + e.message());
    CHECK(user_message(e) == e.message());
  }
}

TEST_CASE("RG_CHECK_EQ's message names the expression and both values, without the location") {
  const int ranks = 3;
  try {
    RG_CHECK_EQ(ranks, 4, "world size");
    FAIL("RG_CHECK_EQ did not throw");
  } catch (const Error& e) {
    CHECK(e.message() == "ranks == 4 (3 vs 4): world size");
  }
}

TEST_CASE("user_message: an Error without a location and a foreign exception read as what()") {
  CHECK(user_message(Error("plain")) == "plain");
  CHECK(Error("plain").where().empty());
  CHECK(user_message(std::runtime_error("[not ours] x")) == "[not ours] x");
}

}  // namespace ringgrad::testing
