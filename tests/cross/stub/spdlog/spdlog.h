// Test-only stand-in for spdlog in the cross-compiled kernel test: Debian's spdlog is not
// installed for arm64 here, and the kernel dispatcher's two log lines are not what this test
// checks (it checks which tables are supported and that they agree with generic).
#pragma once

namespace spdlog {
template <class... Args>
void info(Args&&...) {}
template <class... Args>
void warn(Args&&...) {}
}  // namespace spdlog
