#include "ioserver/engram/engram_page_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <regex>

#include "shared/container/file_io.hpp"

namespace waste {

namespace {

// One aligned read of the header page through O_DIRECT decides whether the filesystem allows it.
int open_direct(const std::filesystem::path& path) {
#ifdef O_DIRECT
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return -1;
  void* probe = std::aligned_alloc(kEngramPage, kEngramPage);
  const bool ok = probe != nullptr && ::pread(fd, probe, kEngramPage, 0) == ssize_t(kEngramPage);
  std::free(probe);
  if (!ok) {
    ::close(fd);
    return -1;
  }
  return fd;
#else
  (void)path;
  return -1;
#endif
}

}  // namespace

EngramPageReader::~EngramPageReader() {
  for (int fd : fds_) ::close(fd);
}

Result<std::unique_ptr<EngramPageReader>> EngramPageReader::open(const std::filesystem::path& dir, bool direct) {
  std::unique_ptr<EngramPageReader> r(new EngramPageReader());
  std::vector<std::pair<int, std::filesystem::path>> found;
  static const std::regex kName("engram-L([0-9]{1,4})\\.bin");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, kName)) found.emplace_back(std::stoi(m[1].str()), entry.path());
  }
  std::sort(found.begin(), found.end());
  if (found.size() > std::size_t(256)) {
    return make_error(Errc::argument, dir.string() + ": " + std::to_string(found.size()) +
                                          " Engram tables; waste-ioserver serves at most 256");
  }
  for (const auto& [layer, path] : found) {
    EngramTableFile t;
    t.name = path.filename().string();
    auto fd = open_file(path, O_RDONLY | O_CLOEXEC);
    if (!fd) return std::unexpected(fd.error());
    std::array<std::byte, kEngramPage> head{};
    auto n = pread_full(fd->get(), head, 0);
    if (!n) return std::unexpected(n.error().with_context(t.name));
    auto h = parse_engram_header(std::span(head.data(), *n), t.name);
    if (!h) return std::unexpected(h.error());
    t.header = *h;
    if (h->layer != layer) {
      return make_error(Errc::format, t.name + ": its header says layer " + std::to_string(h->layer));
    }
    if (h->page_bytes() != kEngramPage) {
      return make_error(Errc::format, t.name + ": rows of " + std::to_string(h->row_bytes()) +
                                          " bytes span several 4 KiB pages; waste-ioserver serves one-page rows only");
    }
    auto size = file_size(fd->get(), path);
    if (!size) return std::unexpected(size.error());
    if (*size != h->file_bytes()) {
      return make_error(Errc::format, t.name + ": " + std::to_string(*size) + " bytes, its header needs " +
                                          std::to_string(h->file_bytes()) +
                                          (*size < h->file_bytes() ? " (truncated)" : " (trailing bytes)"));
    }
    t.pages = h->data_bytes() / kEngramPage;
    if (t.pages > (std::uint64_t{1} << 32)) {
      return make_error(Errc::format, t.name + ": " + std::to_string(t.pages) + " pages; ring entries carry 2^32");
    }
    int read_fd = direct ? open_direct(path) : -1;
    t.direct = read_fd >= 0;
    if (read_fd < 0) read_fd = ::dup(fd->get());
    if (read_fd < 0) return make_error(Errc::io, t.name + ": dup failed");
    r->fds_.push_back(read_fd);
    r->tables_.push_back(std::move(t));
  }
  return r;
}

bool EngramPageReader::direct_io_engaged() const {
  return !tables_.empty() && std::all_of(tables_.begin(), tables_.end(), [](const auto& t) { return t.direct; });
}

Status EngramPageReader::read(int table, int page_id, std::span<std::byte> buffer) const {
  if (table < 0 || table >= int(tables_.size())) {
    return make_error(Errc::argument, "Engram table " + std::to_string(table) + " of " + std::to_string(tables_.size()));
  }
  const EngramTableFile& t = tables_[std::size_t(table)];
  const std::uint64_t page = std::uint32_t(page_id);
  if (page >= t.pages || buffer.size() < kEngramPage) {
    return make_error(Errc::argument, t.name + ": page " + std::to_string(page) + " beyond its " +
                                          std::to_string(t.pages) + " pages");
  }
  const std::uint64_t off = kEngramPage + page * kEngramPage;
  auto n = pread_full(fds_[std::size_t(table)], buffer.first(kEngramPage), off);
  if (!n) return std::unexpected(n.error().with_context(t.name + ": page " + std::to_string(page)));
  if (*n != kEngramPage) {
    return make_error(Errc::io, t.name + ": page " + std::to_string(page) + ": read " + std::to_string(*n) +
                                    " of 4096 bytes at offset " + std::to_string(off) + " (the file was cut short)");
  }
  return ok();
}

}  // namespace waste
