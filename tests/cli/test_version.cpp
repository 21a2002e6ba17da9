// waste version: six lines in a fixed format; the kernel line names the ISA the library picks, the
// lut line decode's LUT mode as a fresh process resolves it (the CPU's default, or WASTE_LUT), the
// decode head line the lm_head decode steps read (q6 by default where the decode rule is on, or
// WASTE_DECODE_HEAD).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>

#include "cli_test_support.hpp"
#include "compute/forward/lut_mode.hpp"
#include "compute/kernels/int8_matmul.hpp"
#include "compute/kernels/kernels.hpp"
#include "tests/shared/env_var.hpp"

namespace waste {
namespace {

// What `waste version` prints for the LUT mode when WASTE_LUT is unset: table kt's default.
std::string default_lut_line(const kernels::KernelTable& kt = kernels::active()) {
  const bool vector = kernels::has_vector_q16_apply(kt);
  return std::string("lut ") + (vector ? "q16" : "f32") + " (default on " + kt.isa +
         (vector ? "" : ": no vector q16 apply") + ")";
}

using test::EnvVar;

}  // namespace

TEST_CASE("waste version prints version, build type, kernel ISA and compiler", "[cli][version]") {
  EnvVar unset("WASTE_LUT", std::nullopt);
  EnvVar unset_head("WASTE_DECODE_HEAD", std::nullopt);
  EnvVar unset_rule("WASTE_DECODE_INT8", std::nullopt);
  auto ran = test::run_waste({"version"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto lines = test::split_lines(ran.out);
  REQUIRE(lines.size() == 6);
  CHECK(std::regex_match(lines[0], std::regex(R"(waste \d+\.\d+\.\d+)")));
  CHECK(std::regex_match(lines[1], std::regex(R"(build (Debug|Release|RelWithDebInfo|MinSizeRel))")));
  CHECK(lines[2] == std::string("kernels ") + kernels::active().isa);
  CHECK(lines[3] == default_lut_line());
  CHECK(lines[4] == (kernels::matmul_i8_is_vector() ? "decode head q6 (default)"
                                                    : "decode head q8 (decode int8 off: no copy)"));
  CHECK(lines[5] == "compiler g++ " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
                        std::to_string(__GNUC_PATCHLEVEL__));

  ran = test::run_waste({"version", "--json"});
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK("waste " + doc["version"].get<std::string>() == lines[0]);
  CHECK("build " + doc["build_type"].get<std::string>() == lines[1]);
  CHECK(doc["kernel_isa"].get<std::string>() == kernels::active().isa);
  CHECK("lut " + doc["lut"].get<std::string>() == lines[3]);
  CHECK("decode head " + doc["decode_head"].get<std::string>() == lines[4]);
}

TEST_CASE("WASTE_DECODE_HEAD picks the decode head, a bad value warns and keeps the default, no copy without the decode rule",
          "[cli][version]") {
  EnvVar rule("WASTE_DECODE_INT8", std::string{"on"});
  for (const char* mode : {"q8", "q6", "q4"}) {
    EnvVar env("WASTE_DECODE_HEAD", std::string{mode});
    const auto ran = test::run_waste({"version"});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    const auto lines = test::split_lines(ran.out);
    REQUIRE(lines.size() == 6);
    CHECK(lines[4] == std::string("decode head ") + mode + " (WASTE_DECODE_HEAD)");
    CHECK(ran.err.empty());
  }
  {
    EnvVar env("WASTE_DECODE_HEAD", std::string{"q5"});
    const auto ran = test::run_waste({"version"});
    REQUIRE(ran.rc == 0);
    const auto lines = test::split_lines(ran.out);
    REQUIRE(lines.size() == 6);
    CHECK(lines[4] == "decode head q6 (default)");
    CHECK(ran.err.find("WASTE_DECODE_HEAD: 'q5' is not a decode head (q8, q6 or q4); the decode head stays q6 "
                       "(the default)") != std::string::npos);
  }
  EnvVar off("WASTE_DECODE_INT8", std::string{"off"});
  EnvVar env("WASTE_DECODE_HEAD", std::string{"q4"});
  const auto ran = test::run_waste({"version"});
  REQUIRE(ran.rc == 0);
  const auto lines = test::split_lines(ran.out);
  REQUIRE(lines.size() == 6);
  CHECK(lines[4] == "decode head q8 (decode int8 off: no copy)");
}

TEST_CASE("WASTE_LUT overrides the CPU's LUT mode both ways, a bad value warns and keeps the default",
          "[cli][version]") {
  for (const char* mode : {"f32", "q16"}) {
    EnvVar env("WASTE_LUT", std::string{mode});
    const auto ran = test::run_waste({"version"});
    INFO(ran.err);
    REQUIRE(ran.rc == 0);
    const auto lines = test::split_lines(ran.out);
    REQUIRE(lines.size() == 6);
    CHECK(lines[3] == std::string("lut ") + mode + " (WASTE_LUT)");
    CHECK(ran.err.empty());
  }
  EnvVar env("WASTE_LUT", std::string{"fast"});
  const auto ran = test::run_waste({"version"});
  REQUIRE(ran.rc == 0);
  const auto lines = test::split_lines(ran.out);
  REQUIRE(lines.size() == 6);
  CHECK(lines[3] == default_lut_line());
  const kernels::KernelTable& kt = kernels::active();
  const std::string kept = kernels::has_vector_q16_apply(kt) ? "q16" : "f32";
  CHECK(ran.err.find("WASTE_LUT: 'fast' is not a LUT mode (f32 or q16); expert LUTs stay " + kept +
                     " (the default on " + kt.isa + ")") != std::string::npos);
}

TEST_CASE("The LUT mode a process starts in follows the kernel table it runs (WASTE_FORCE_ISA)", "[cli][version]") {
  // q16 only where the table has a vector q16 apply: forcing a table without one on a VBMI CPU
  // gives f32, since q16 would run generic's scalar loop there.
  EnvVar unset("WASTE_LUT", std::nullopt);
  for (const kernels::KernelTable* kt : kernels::supported()) {
    INFO("isa " << kt->isa);
    EnvVar isa("WASTE_FORCE_ISA", std::string{kt->isa});
    const auto ran = test::run_waste({"version"});
    REQUIRE(ran.rc == 0);
    const auto lines = test::split_lines(ran.out);
    REQUIRE(lines.size() == 6);
    CHECK(lines[2] == std::string("kernels ") + kt->isa);
    CHECK(lines[3] == default_lut_line(*kt));
  }
}

}  // namespace waste
