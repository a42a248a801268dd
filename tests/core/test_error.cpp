// Tests for core/error.h (where an error was thrown and what it says are kept apart) and
// core/choices.h (a setting's names and values).
#include <doctest/doctest.h>

#include <string>

#include "core/choices.h"
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

TEST_CASE("choices: a name gives its value and back, a wrong name is refused naming the choices") {
  enum class Fruit { apple, pear, plum };
  const Choices<Fruit> fruits{
      {"apple", Fruit::apple}, {"pear", Fruit::pear}, {"plum", Fruit::plum}};
  CHECK(choice_list(fruits) == "apple, pear or plum");
  CHECK(choice_value(fruits, "pear", "--fruit") == Fruit::pear);
  CHECK(choice_name(fruits, Fruit::plum) == "plum");
  CHECK_THROWS_WITH_AS(choice_value(fruits, "kiwi", "--fruit"),
                       doctest::Contains("--fruit: 'kiwi' is not one of apple, pear or plum"),
                       InvalidArgument);
}

}  // namespace ringgrad::testing
