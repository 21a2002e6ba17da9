#include "ioserver/nvme/uring_record_reader.hpp"

#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "shared/container/manifest.hpp"

namespace waste {

namespace {

constexpr unsigned kRingEntries = 4;  // one read in flight per thread; a little slack

// This thread's ring. Rings hold no per-reader state (no registered files or buffers), so one
// per thread serves every reader; it closes when the thread exits.
class ThreadRing {
 public:
  ThreadRing() { init_rc_ = io_uring_queue_init(kRingEntries, &ring_, 0); }
  ~ThreadRing() { close(); }
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;

  [[nodiscard]] bool usable() const { return init_rc_ == 0; }
  io_uring& ring() { return ring_; }
  // After a failed submit the SQE may still sit in the queue: never reuse such a ring.
  void close() {
    if (init_rc_ == 0) io_uring_queue_exit(&ring_);
    init_rc_ = -EBADF;
  }

 private:
  io_uring ring_{};
  int init_rc_ = -1;
};

ThreadRing& thread_ring() {
  thread_local ThreadRing ring;
  return ring;
}

std::string record_who(int layer, int expert) {
  return "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + ": ";
}

// Reads `out` from fd at offset through `ring`, looping over short reads like pread_full does.
// Returns the bytes read (short only at EOF) or -errno.
long long uring_read_full(ThreadRing& tr, int fd, std::span<std::byte> out, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < out.size()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&tr.ring());
    if (sqe == nullptr) return -EBUSY;  // cannot happen: every SQE is reaped before the next
    io_uring_prep_read(sqe, fd, out.data() + done, unsigned(out.size() - done), offset + done);
    const int submitted = io_uring_submit(&tr.ring());
    if (submitted != 1) {
      tr.close();
      return submitted < 0 ? submitted : -EIO;
    }
    io_uring_cqe* cqe = nullptr;
    int rc = 0;
    do {
      rc = io_uring_wait_cqe(&tr.ring(), &cqe);
    } while (rc == -EINTR);
    if (rc < 0) {
      tr.close();
      return rc;
    }
    const int res = cqe->res;
    io_uring_cqe_seen(&tr.ring(), cqe);
    if (res == -EINTR || res == -EAGAIN) continue;
    if (res < 0) return res;
    if (res == 0) break;
    done += std::size_t(res);
  }
  return static_cast<long long>(done);
}

}  // namespace

UringRecordReader::UringRecordReader(ExpertBanks banks, const Manifest& manifest) : banks_(std::move(banks)) {
  for (const auto& [layer, bank] : manifest.banks) {
    if (layer + 1 > n_layers_) n_layers_ = layer + 1;
    if (bank.experts > n_experts_) n_experts_ = bank.experts;
  }
  present_.assign(std::size_t(n_layers_), false);
  for (const auto& [layer, bank] : manifest.banks) present_[std::size_t(layer)] = true;

  // One probe ring decides for the whole reader: kernels and seccomp filters refuse io_uring
  // for every thread alike.
  io_uring probe{};
  const int rc = io_uring_queue_init(kRingEntries, &probe, 0);
  if (rc == 0) {
    io_uring_queue_exit(&probe);
    engaged_ = true;
  } else {
    fallback_reason_ = std::string("io_uring_queue_init: ") + std::strerror(-rc);
  }
}

bool UringRecordReader::has_layer(int layer) const {
  return layer >= 0 && layer < n_layers_ && present_[std::size_t(layer)];
}

Status UringRecordReader::read(int layer, int expert, std::span<std::byte> buffer) const {
  if (!engaged_) return banks_.read_record(layer, expert, buffer);
  ThreadRing& tr = thread_ring();
  // A thread whose own ring failed (memlock limit reached) still serves, through pread.
  if (!tr.usable()) return banks_.read_record(layer, expert, buffer);

  auto source = banks_.locate_record(layer, expert, buffer);
  if (!source) return std::unexpected(source.error());
  const std::string who = record_who(layer, expert);
  if (source->record.size() > std::numeric_limits<unsigned>::max()) {
    return make_error(Errc::argument, who + "record of " + std::to_string(source->record.size()) +
                                          " bytes is too long for one io_uring read");
  }
  const long long n = uring_read_full(tr, source->fd, source->record, source->offset);
  if (n < 0) return make_error(Errc::io, who + "io_uring read: " + std::strerror(int(-n)));
  if (std::size_t(n) != source->record.size()) {
    return make_error(Errc::io, who + "short read (got " + std::to_string(n) + " of " +
                                    std::to_string(source->record.size()) + " bytes)");
  }
  return banks_.check_record(layer, expert, source->record);
}

std::unique_ptr<UringRecordReader> make_uring_record_reader(ExpertBanks banks, const Manifest& manifest) {
  return std::make_unique<UringRecordReader>(std::move(banks), manifest);
}

}  // namespace waste
