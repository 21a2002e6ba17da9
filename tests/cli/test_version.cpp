// waste version: four lines in a fixed format; the kernel line names the ISA the library picks.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <regex>

#include "cli_test_support.hpp"
#include "compute/kernels/kernels.hpp"

namespace waste {

TEST_CASE("waste version prints version, build type, kernel ISA and compiler", "[cli][version]") {
  auto ran = test::run_waste({"version"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const auto lines = test::split_lines(ran.out);
  REQUIRE(lines.size() == 4);
  CHECK(std::regex_match(lines[0], std::regex(R"(waste \d+\.\d+\.\d+)")));
  CHECK(std::regex_match(lines[1], std::regex(R"(build (Debug|Release|RelWithDebInfo|MinSizeRel))")));
  CHECK(lines[2] == std::string("kernels ") + kernels::active().isa);
  CHECK(lines[3] == "compiler g++ " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
                        std::to_string(__GNUC_PATCHLEVEL__));

  ran = test::run_waste({"version", "--json"});
  REQUIRE(ran.rc == 0);
  const auto doc = nlohmann::json::parse(ran.out);
  CHECK("waste " + doc["version"].get<std::string>() == lines[0]);
  CHECK("build " + doc["build_type"].get<std::string>() == lines[1]);
  CHECK(doc["kernel_isa"].get<std::string>() == kernels::active().isa);
}

}  // namespace waste
