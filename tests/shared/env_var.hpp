// test::EnvVar: sets (or with nullopt unsets) an environment variable for the processes a test
// starts, and restores the parent's value when it goes out of scope.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace waste::test {

class EnvVar {
 public:
  EnvVar(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~EnvVar() {
    if (saved_) setenv(name_, saved_->c_str(), 1);
    else unsetenv(name_);
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

}  // namespace waste::test
