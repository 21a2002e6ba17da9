// libFuzzer harness for the safetensors header parser (compute/convert/safetensors.cpp): any
// byte string is a candidate file; the parser must return a value or an error, never crash,
// and every tensor it accepts must lie inside the buffer.
// Build (clang): clang++ -std=c++2b -fsanitize=fuzzer,address -I. tests/fuzz/fuzz_safetensors.cpp
//   compute/convert/safetensors.cpp shared/container/file_io.cpp shared/result.cpp
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "compute/convert/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  auto header = waste::convert::parse_safetensors_header(bytes, size, "fuzz");
  if (header) {
    for (const auto& t : header->tensors) {
      if (t.end < t.begin || header->data_start + t.end > size) std::abort();  // a view outside the file
    }
  }
  return 0;
}
