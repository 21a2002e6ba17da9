#include "ioserver/bench/uring_queue.hpp"

#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace waste {

namespace {

std::string record_who(int layer, int expert) {
  return "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + ": ";
}

}  // namespace

struct UringQueue::Impl {
  const ExpertBanks* banks = nullptr;
  unsigned depth = 0;
  io_uring ring{};
  bool ring_ready = false;
  ~Impl() {
    if (ring_ready) io_uring_queue_exit(&ring);
  }

  struct Slot {
    std::size_t index = 0;
    Key key;
    ExpertBanks::RecordSource source;
    std::size_t done = 0;  // bytes landed so far (short completions are resubmitted for the rest)
  };
  std::vector<Slot> slots;
  std::vector<unsigned> free_slots;

  // Queues the rest of `slot`'s record; false when the SQ is full (cannot happen: one SQE per slot).
  bool queue(unsigned slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe == nullptr) return false;
    Slot& s = slots[slot];
    io_uring_prep_read(sqe, s.source.fd, s.source.record.data() + s.done, unsigned(s.source.record.size() - s.done),
                       s.source.offset + s.done);
    io_uring_sqe_set_data64(sqe, slot);
    return true;
  }
};

UringQueue::UringQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UringQueue::UringQueue(UringQueue&&) noexcept = default;
UringQueue& UringQueue::operator=(UringQueue&&) noexcept = default;
UringQueue::~UringQueue() = default;

unsigned UringQueue::depth() const { return impl_->depth; }

Result<UringQueue> UringQueue::create(const ExpertBanks& banks, unsigned depth) {
  if (depth == 0) return make_error(Errc::argument, "io_uring queue: depth must be at least 1");
  auto impl = std::make_unique<Impl>();
  const int rc = io_uring_queue_init(depth, &impl->ring, 0);
  if (rc < 0) return make_error(Errc::io, std::string("io_uring_queue_init: ") + std::strerror(-rc));
  impl->ring_ready = true;
  impl->banks = &banks;
  impl->depth = depth;
  impl->slots.resize(depth);
  for (unsigned s = depth; s-- > 0;) impl->free_slots.push_back(s);
  return UringQueue(std::move(impl));
}

Status UringQueue::run(std::size_t count, const KeyOf& key_of, const BufferOf& buffer_of, const Done& done) {
  Impl& q = *impl_;
  std::size_t next = 0;
  unsigned in_flight = 0;
  Status ring_error;
  while ((ring_error && next < count) || in_flight > 0) {
    unsigned queued = 0;
    while (ring_error && next < count && !q.free_slots.empty()) {
      const unsigned slot = q.free_slots.back();
      const Key key = key_of(next);
      auto source = q.banks->locate_record(key.layer, key.expert, buffer_of(slot));
      if (!source) {
        done(next++, slot, std::unexpected(source.error()));
        continue;
      }
      q.free_slots.pop_back();
      q.slots[slot] = Impl::Slot{next++, key, *source, 0};
      if (!q.queue(slot)) {
        ring_error = make_error(Errc::io, "io_uring queue: no free submission entry");
        q.free_slots.push_back(slot);
        break;
      }
      ++queued;
      ++in_flight;
    }
    if (queued > 0) {
      const int submitted = io_uring_submit(&q.ring);
      // A ring that refuses a submit is not reused (as in UringRecordReader); reads already in
      // flight are cancelled and waited for by the kernel when the queue is destroyed.
      if (submitted < 0) return make_error(Errc::io, std::string("io_uring_submit: ") + std::strerror(-submitted));
    }
    if (in_flight == 0) continue;
    io_uring_cqe* cqe = nullptr;
    int rc = 0;
    do {
      rc = io_uring_wait_cqe(&q.ring, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) return make_error(Errc::io, std::string("io_uring_wait_cqe: ") + std::strerror(-rc));
    // Reap everything that has landed, then refill in one submit.
    unsigned resubmitted = 0;
    while (cqe != nullptr) {
      const auto slot = unsigned(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&q.ring, cqe);
      Impl::Slot& s = q.slots[slot];
      const std::string who = record_who(s.key.layer, s.key.expert);
      bool finished = true;
      Status status;
      if (res == -EINTR || res == -EAGAIN) {
        finished = false;
      } else if (res < 0) {
        status = make_error(Errc::io, who + "io_uring read: " + std::strerror(-res));
      } else if (res == 0) {
        status = make_error(Errc::io, who + "short read (got " + std::to_string(s.done) + " of " +
                                          std::to_string(s.source.record.size()) + " bytes)");
      } else {
        s.done += std::size_t(res);
        finished = s.done == s.source.record.size();
        if (finished) status = q.banks->check_record(s.key.layer, s.key.expert, s.source.record);
      }
      if (!finished) {
        if (q.queue(slot)) {
          ++resubmitted;
        } else {
          status = make_error(Errc::io, who + "io_uring queue: no free submission entry");
          finished = true;
        }
      }
      if (finished) {
        --in_flight;
        done(s.index, slot, status);
        q.free_slots.push_back(slot);
      }
      cqe = nullptr;
      if (io_uring_peek_cqe(&q.ring, &cqe) != 0) cqe = nullptr;
    }
    if (resubmitted > 0) {
      const int submitted = io_uring_submit(&q.ring);
      if (submitted < 0) return make_error(Errc::io, std::string("io_uring_submit: ") + std::strerror(-submitted));
    }
  }
  return ring_error;
}

}  // namespace waste
