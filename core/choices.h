// A setting with a fixed set of values (--amp, --lr-schedule, --backend, ...): one table of the
// names a user types and the values they stand for, kept next to the enum it names. The apps
// turn a flag's text into the value with it once, where flags are read (apps/cli_checks.h's
// add_choice); libraries take the value and print its name from the same table, so the list
// of choices is written once.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace ringgrad {

template <class T>
using Choices = std::vector<std::pair<std::string, T>>;

// "none, fp16 or bf16".
template <class T>
std::string choice_list(const Choices<T>& choices) {
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i)
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i].first;
  return list;
}

// The value named `text`; throws InvalidArgument naming `flag`, the text and the choices.
template <class T>
T choice_value(const Choices<T>& choices, const std::string& text, const std::string& flag) {
  for (const auto& [name, value] : choices)
    if (name == text) return value;
  RG_THROW(InvalidArgument, flag, ": '", text, "' is not one of ", choice_list(choices));
}

// The name of `value` (every value of the enum has one: the table is its whole list).
template <class T>
const std::string& choice_name(const Choices<T>& choices, const T& value) {
  for (const auto& [name, v] : choices)
    if (v == value) return name;
  RG_THROW(InvalidArgument, "a value with no name among ", choice_list(choices));
}

}  // namespace ringgrad
