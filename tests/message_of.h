// message_of<E>(fn): runs `fn`, fails the test case unless it throws E, and returns the
// exception's message for further checks. Shared by every doctest suite.
#pragma once
#include <doctest/doctest.h>

#include <string>

namespace ringgrad::testing {

template <class E, class F>
std::string message_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception that did not come");
  return {};
}

}  // namespace ringgrad::testing
