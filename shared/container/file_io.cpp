#include "shared/container/file_io.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace waste {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<UniqueFd> open_file(const std::filesystem::path& path, int flags, int mode) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return make_error(Errc::io, path.string() + ": " + std::strerror(errno));
  return UniqueFd(fd);
}

Result<std::uint64_t> file_size(int fd, const std::filesystem::path& path_for_errors) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error(Errc::io, path_for_errors.string() + ": " + std::strerror(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

Result<std::size_t> pread_full(int fd, std::span<std::byte> out, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, std::string("pread: ") + std::strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

Status write_all(int fd, std::span<const std::byte> bytes, const std::filesystem::path& path_for_errors) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, path_for_errors.string() + ": write: " + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Result<std::string> read_text_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  auto fd = open_file(path, O_RDONLY);
  if (!fd) return std::unexpected(fd.error());
  auto size = file_size(fd->get(), path);
  if (!size) return std::unexpected(size.error());
  if (*size > max_bytes) {
    return make_error(Errc::format, path.string() + ": " + std::to_string(*size) + " bytes exceeds the limit of " +
                                        std::to_string(max_bytes));
  }
  std::string text(*size, '\0');
  auto n = pread_full(fd->get(), std::as_writable_bytes(std::span(text)), 0);
  if (!n) return std::unexpected(n.error().with_context(path.string()));
  text.resize(*n);
  return text;
}

Status write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    auto fd = open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    if (!fd) return std::unexpected(fd.error());
    WASTE_TRY(write_all(fd->get(), std::as_bytes(std::span(contents)), tmp));
    if (::fsync(fd->get()) != 0) return make_error(Errc::io, tmp.string() + ": fsync: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return make_error(Errc::io, path.string() + ": rename: " + std::strerror(errno));
  }
  return {};
}

}  // namespace waste
