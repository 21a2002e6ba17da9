// How many times Manifest::parse has run in this process (every parse, whatever called it), so a
// test can hold the engine's open to one read of the container's description
// (compute/api/engine_open.hpp). Declared apart from manifest.hpp so that header's many readers
// do not depend on it.
#pragma once

#include <cstdint>

namespace waste {

std::uint64_t manifest_parses() noexcept;

}  // namespace waste
