// Result<T>: the project's error channel for expected failures (tier 1 of the house style).
// An Error carries a category and a message that names the thing: file, layer, expert, field.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <utility>

namespace waste {

enum class Errc : std::uint8_t {
  io,           // a read, write, open or map failed, or a record failed its checks at read time
  format,       // a file is not a valid WASTE v0 container (or session, or config)
  ram_budget,   // the requested budget is below the floor or would exceed the daemon's budget
  out_of_memory,
  argument,     // the caller passed something invalid (token id out of range, bad flag value)
  unsupported,  // valid input we do not implement (yet)
  cancelled,    // a callback asked to stop
  ipc,          // the daemon is gone, refused, or spoke a different protocol
};

const char* errc_name(Errc code) noexcept;

struct Error {
  Errc code;
  std::string message;

  // "context: message", used to add the outer thing (path, layer) as an error travels up.
  [[nodiscard]] Error with_context(const std::string& context) const {
    return Error{code, context + ": " + message};
  }
};

template <class T>
using Result = std::expected<T, Error>;

using Status = std::expected<void, Error>;

inline std::unexpected<Error> make_error(Errc code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

inline Status ok() { return {}; }

}  // namespace waste

// Propagate an error from an expression returning Result/Status; binds nothing.
#define WASTE_TRY(expr)                                               \
  do {                                                                \
    auto waste_try_result_ = (expr);                                  \
    if (!waste_try_result_) return std::unexpected(std::move(waste_try_result_.error())); \
  } while (0)

// Assign the value of an expression returning Result<T> to `lhs`, or propagate its error.
#define WASTE_ASSIGN(lhs, expr)                                                                \
  do {                                                                                         \
    auto waste_assign_result_ = (expr);                                                        \
    if (!waste_assign_result_) return std::unexpected(std::move(waste_assign_result_.error())); \
    lhs = *waste_assign_result_;                                                               \
  } while (0)
