// waste verify MODEL: check every expert record's header and crc32 and every trunk tensor's
// bounds. Prints one line per damaged record ("expert E of layer L: reason") and a summary;
// exits non-zero when anything is damaged.
#include <fcntl.h>

#include <cstdio>

#include "cli/command.hpp"
#include "shared/container/codebooks.hpp"
#include "shared/container/container.hpp"
#include "shared/container/expert_bank.hpp"
#include "shared/container/file_io.hpp"

namespace waste::cli {
namespace {

struct VerifyArgs {
  std::string model;
};

int run_verify(const VerifyArgs& args) {
  const ContainerFiles files{args.model};
  auto text = read_manifest_text(files.dir);
  if (!text) {
    std::fprintf(stderr, "waste verify: %s\n", text.error().message.c_str());
    return 2;
  }
  auto manifest = Manifest::parse(*text);
  if (!manifest) {
    std::fprintf(stderr, "waste verify: %s: %s\n", files.manifest().c_str(), manifest.error().message.c_str());
    return 2;
  }
  const Manifest& m = *manifest;
  int damaged = 0;
  auto report = [&](const std::string& line) {
    std::printf("%s\n", line.c_str());
    ++damaged;
  };

  // Trunk: every tensor inside trunk.bin.
  std::uint64_t trunk_bytes = 0;
  if (auto fd = open_file(files.trunk(), O_RDONLY); !fd) {
    report(fd.error().message);
  } else if (auto size = file_size(fd->get(), files.trunk()); size) {
    trunk_bytes = *size;
    for (const auto& t : m.trunk) {
      if (auto s = check_trunk_bounds(t, trunk_bytes); !s) report(s.error().message);
    }
  }
  if (auto s = validate_text_tensors(m); !s) report(s.error().message);

  // Experts: every record, header and crc.
  std::uint64_t records = 0;
  if (m.config.n_experts > 0) {
    auto geometry = ExpertGeometry::from(m.config, m.quant);
    int n_books = 0;
    if (auto fd = open_file(files.codebooks(), O_RDONLY); !fd) {
      report(fd.error().message);
    } else if (auto size = file_size(fd->get(), files.codebooks()); size) {
      n_books = int(std::min<std::uint64_t>(*size / Codebooks::record_bytes(m.quant), 1 << 30));
    }
    if (!geometry) {
      report(geometry.error().message);
    } else {
      for (const auto& [layer, bank] : m.banks) {
        const auto path = files.dir / bank.file;
        auto fd = open_file(path, O_RDONLY);
        if (!fd) {
          report(fd.error().message);
          continue;
        }
        auto size = file_size(fd->get(), path);
        if (size && *size != bank.bytes) {
          report(path.string() + ": size " + std::to_string(*size) + " != manifest bytes " + std::to_string(bank.bytes));
        }
        const std::uint64_t rec = bank.record_bytes();
        if (rec % kRecordAlign != 0) {
          report("layer " + std::to_string(layer) + ": record size " + std::to_string(rec) + " is not a multiple of 4096");
          continue;
        }
        AlignedBuffer buffer(rec);
        for (int e = 0; e < bank.experts; ++e) {
          ++records;
          auto record = buffer.span().first(rec);
          auto n = pread_full(fd->get(), record, std::uint64_t(e) * rec);
          Status s;
          if (!n) {
            s = make_error(Errc::io, "expert " + std::to_string(e) + " of layer " + std::to_string(layer) + ": " +
                                         n.error().message);
          } else if (*n != rec) {
            s = make_error(Errc::io, "expert " + std::to_string(e) + " of layer " + std::to_string(layer) +
                                         ": short read (got " + std::to_string(*n) + " of " + std::to_string(rec) +
                                         " bytes)");
          } else {
            s = validate_record_header(record, layer, e, m.quant, *geometry, n_books);
            if (s) s = verify_record_crc(record, layer, e, *geometry);
          }
          if (!s) report(s.error().message);
        }
      }
    }
  }
  std::printf("%s: %zu trunk tensors, %llu expert records in %zu banks checked; %d damaged\n", args.model.c_str(),
              m.trunk.size(), (unsigned long long)records, m.banks.size(), damaged);
  return damaged == 0 ? 0 : 1;
}

const CommandRegistration kRegistration{Command{
    "verify", "Check every expert record (header, crc32) and trunk tensor bounds",
    [](CLI::App& sub) -> std::function<int()> {
      auto args = std::make_shared<VerifyArgs>();
      sub.add_option("model", args->model, "Container directory (NAME.waste)")->type_name("DIR")->required();
      return [args] { return run_verify(*args); };
    }}};

}  // namespace
}  // namespace waste::cli
