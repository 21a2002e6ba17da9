// waste version: version, build type, the kernel ISA this CPU gets, decode's LUT mode, compiler.
#include <cstdio>
#include <string>

#include "cli/cli_common.hpp"
#include "cli/command.hpp"
#include "compute/forward/head_mode.hpp"
#include "compute/forward/lut_mode.hpp"
#include "compute/kernels/kernels.hpp"

#ifndef WASTE_VERSION
#define WASTE_VERSION "unknown"
#endif
#ifndef WASTE_BUILD_TYPE
#define WASTE_BUILD_TYPE "unknown"
#endif

namespace waste::cli {
namespace {

std::string compiler() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return "g++ " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

int run_version(bool json) {
  const char* isa = kernels::active().isa;
  const std::string lut = forward::lut_mode_report();
  const std::string head = forward::head_mode_report();
  if (json) {
    print_json({{"version", WASTE_VERSION},
                {"build_type", WASTE_BUILD_TYPE},
                {"kernel_isa", isa},
                {"lut", lut},
                {"decode_head", head},
                {"compiler", compiler()},
                {"cxx_standard", __cplusplus}});
    return 0;
  }
  std::printf("waste %s\nbuild %s\nkernels %s\nlut %s\ndecode head %s\ncompiler %s\n", WASTE_VERSION,
              WASTE_BUILD_TYPE, isa, lut.c_str(), head.c_str(), compiler().c_str());
  return 0;
}

const CommandRegistration kRegistration{Command{
    "version", "Print version, build type, kernel ISA, decode's LUT mode and lm_head, and compiler",
    [](CLI::App& sub) -> std::function<int()> {
      auto json = std::make_shared<bool>(false);
      sub.add_flag("--json", *json, "JSON output");
      return [json] { return run_version(*json); };
    }}};

}  // namespace
}  // namespace waste::cli
