// Errors for the whole tree: typed exceptions and the CHECK macros that throw them with
// [file:line], the failed expression, both values (for CHECK_EQ & co.) and a formatted message.
// Library code never exits; apps catch at main and return non-zero.
//
// Who reads what: a person running a program (ringgrad-train, ringgrad-run, the perf and bench
// binaries, a PyTorch user of the plugin) is shown user_message(e), the sentence alone; our
// source line means nothing to them and reads as a crash. what(), with [file:line], is for
// developers: logs (log_warn & co.) and test failures. Every catch that prints to a user
// follows this; docs/architecture.md states it for readers of the tree.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ringgrad {

// what() is "[file.cpp:42] message" for logs and developers; where() and message() keep the
// two apart, so a program can show a user the sentence alone (user_message below).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message) {}
  Error(std::string where, const std::string& message)
      : std::runtime_error("[" + where + "] " + message),
        where_(std::move(where)),
        message_(message) {}
  const std::string& where() const { return where_; }  // "file.cpp:42", or "" when not known
  const std::string& message() const { return message_; }

 private:
  std::string where_;
  std::string message_;
};
class InvalidArgument : public Error {
 public:
  using Error::Error;
};
class IoError : public Error {
 public:
  using Error::Error;
};
class TimeoutError : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
// Short file name: "kernels/cpu/conv2d.cpp" rather than the absolute build path.
constexpr const char* short_file(const char* path) {
  const char* last = path;
  const char* prev = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/') {
      prev = last;
      last = p + 1;
    }
  }
  return prev;
}
}  // namespace detail

// Concatenates any streamable arguments into one string.
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

template <class E = Error, class... Args>
[[noreturn]] void throw_at(const char* file, int line, const Args&... args) {
  throw E(str_cat(detail::short_file(file), ":", line), str_cat(args...));
}

// What a user should read: an Error's message without its location, else what().
inline std::string user_message(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return error ? error->message() : e.what();
}

}  // namespace ringgrad

#define RG_THROW(ExcType, ...) ::ringgrad::throw_at<ExcType>(__FILE__, __LINE__, __VA_ARGS__)

#define RG_CHECK(cond, ...)                                                                    \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::ringgrad::throw_at<::ringgrad::Error>(__FILE__, __LINE__, #cond, ": ", ##__VA_ARGS__); \
  } while (0)

#define RG_CHECK_OP(a, b, op, ...)                                                               \
  do {                                                                                           \
    const auto& rg_a_ = (a);                                                                     \
    const auto& rg_b_ = (b);                                                                     \
    if (!(rg_a_ op rg_b_))                                                                       \
      ::ringgrad::throw_at<::ringgrad::Error>(__FILE__, __LINE__, #a " " #op " " #b " (", rg_a_, \
                                              " vs ", rg_b_, "): ", ##__VA_ARGS__);              \
  } while (0)

#define RG_CHECK_EQ(a, b, ...) RG_CHECK_OP(a, b, ==, __VA_ARGS__)
#define RG_CHECK_NE(a, b, ...) RG_CHECK_OP(a, b, !=, __VA_ARGS__)
#define RG_CHECK_LT(a, b, ...) RG_CHECK_OP(a, b, <, __VA_ARGS__)
#define RG_CHECK_LE(a, b, ...) RG_CHECK_OP(a, b, <=, __VA_ARGS__)
#define RG_CHECK_GT(a, b, ...) RG_CHECK_OP(a, b, >, __VA_ARGS__)
#define RG_CHECK_GE(a, b, ...) RG_CHECK_OP(a, b, >=, __VA_ARGS__)
