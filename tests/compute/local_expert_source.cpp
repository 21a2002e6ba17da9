#include "local_expert_source.hpp"

#include <algorithm>
#include <chrono>
#include <string>

namespace waste {

Result<std::unique_ptr<LocalExpertSource>> LocalExpertSource::open(const ContainerInfo& info,
                                                                    LocalSourceOptions options) {
  if (options.reader_threads < 0 || options.reader_threads > kMaxReaderThreads) {
    return make_error(Errc::argument, "reader_threads " + std::to_string(options.reader_threads) +
                                          " must be 0.." + std::to_string(kMaxReaderThreads));
  }
  auto banks = ExpertBanks::open(info.files.dir, info.manifest, info.n_codebooks,
                                 BankReadOptions{options.direct_io, options.verify_records});
  if (!banks) return std::unexpected(banks.error());
  std::size_t capacity = options.cache_records;
  if (options.resident) {
    capacity = 0;
    for (const auto& [layer, bank] : info.manifest.banks) capacity += std::size_t(bank.experts);
  }
  // Resident mode never reads after open: no readers needed.
  const int readers = options.resident ? 0 : options.reader_threads;
  std::unique_ptr<LocalExpertSource> source(
      new LocalExpertSource(std::move(*banks), info.geometry, info.manifest, capacity, readers));
  if (options.resident) WASTE_TRY(source->load_all());
  return source;
}

LocalExpertSource::LocalExpertSource(ExpertBanks banks, ExpertGeometry geometry, const Manifest& manifest,
                                     std::size_t capacity, int reader_threads)
    : banks_(std::move(banks)),
      geometry_(geometry),
      n_layers_(manifest.config.n_layers),
      n_experts_(manifest.config.n_experts),
      capacity_(capacity) {
  moe_layer_.assign(std::size_t(n_layers_), false);
  for (const auto& [layer, bank] : manifest.banks) {
    if (layer >= 0 && layer < n_layers_) moe_layer_[std::size_t(layer)] = true;
  }
  // Buffers are allocated lazily on first use, so a large capacity costs nothing until filled.
  slots_.resize(capacity);
  index_.reserve(capacity);
  held_.reserve(std::size_t(std::max(manifest.config.top_k, 1)));
  queue_.reserve(std::size_t(std::max(manifest.config.top_k, 1)) * 2);
  for (int i = 0; i < reader_threads; ++i) readers_.emplace_back([this] { reader_loop(); });
}

LocalExpertSource::~LocalExpertSource() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  // Readers finish the read in hand (its buffer is still alive) and exit before banks_ closes.
  for (std::thread& t : readers_) t.join();
}

void LocalExpertSource::reader_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || queue_head_ < queue_.size(); });
    if (stop_) return;
    const int id = queue_[queue_head_++];
    if (queue_head_ == queue_.size()) {
      queue_.clear();
      queue_head_ = 0;
    }
    Slot& slot = slots_[std::size_t(id)];
    const int layer = slot.layer, expert = slot.expert;
    const std::span<std::byte> buffer(slot.buffer.data(), banks_.record_bytes());
    lock.unlock();
    Status read = banks_.read_record(layer, expert, buffer);
    if (read) bytes_read_ += banks_.record_bytes();
    lock.lock();
    Slot& landed = slots_[std::size_t(id)];  // slots_ may have grown meanwhile (under mutex_)
    landed.state = read ? SlotState::ready : SlotState::failed;
    if (!read) landed.error = read.error();
    landed.landed = ++landed_seq_;
    landed_cv_.notify_all();
  }
}

Status LocalExpertSource::load_all() {
  int slot = 0;
  for (int layer = 0; layer < n_layers_; ++layer) {
    if (!moe_layer_[std::size_t(layer)]) continue;
    for (int expert = 0; expert < n_experts_; ++expert, ++slot) {
      Slot& s = slots_[std::size_t(slot)];
      s.buffer = AlignedBuffer(banks_.record_bytes());
      WASTE_TRY(banks_.read_record(layer, expert, s.buffer.span().first(banks_.record_bytes())));
      bytes_read_ += banks_.record_bytes();
      s.layer = layer;
      s.expert = expert;
      s.state = SlotState::ready;
      index_.emplace(key_of(layer, expert), slot);
    }
  }
  return ok();
}

int LocalExpertSource::pick_victim() {
  std::lock_guard lock(mutex_);  // slot states of in-flight reads change under it
  int victim = -1;
  for (int i = 0; i < int(capacity_); ++i) {
    const Slot& s = slots_[std::size_t(i)];
    if (!reusable(s)) continue;
    if (s.state == SlotState::empty) return i;
    if (victim < 0 || s.last_use < slots_[std::size_t(victim)].last_use) victim = i;
  }
  return victim;
}

int LocalExpertSource::pick_private() {
  std::lock_guard lock(mutex_);
  for (std::size_t i = capacity_; i < slots_.size(); ++i) {
    if (reusable(slots_[i])) return int(i);
  }
  // Growing moves Slot objects (not their buffers); readers index slots_ under the mutex.
  slots_.emplace_back();
  return int(slots_.size() - 1);
}

Status LocalExpertSource::start_read(int slot, int layer, int expert) {
  Slot& s = slots_[std::size_t(slot)];
  if (s.buffer.size() < banks_.record_bytes()) s.buffer = AlignedBuffer(banks_.record_bytes());
  s.layer = layer;
  s.expert = expert;
  s.error.reset();
  if (readers_.empty()) {
    const auto start = std::chrono::steady_clock::now();
    Status read = banks_.read_record(layer, expert, s.buffer.span().first(banks_.record_bytes()));
    stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!read) {
      s.state = SlotState::empty;
      return read;
    }
    bytes_read_ += banks_.record_bytes();
    s.state = SlotState::ready;
    s.landed = ++landed_seq_;
    return ok();
  }
  {
    std::lock_guard lock(mutex_);
    s.state = SlotState::in_flight;
    queue_.push_back(slot);
  }
  work_cv_.notify_one();
  return ok();
}

Status LocalExpertSource::request(int layer, std::span<const int> experts) {
  if (layer < 0 || layer >= n_layers_ || !moe_layer_[std::size_t(layer)]) {
    return make_error(Errc::argument, "expert request for layer " + std::to_string(layer) + ", which has no experts");
  }
  for (const int expert : experts) {
    if (expert < 0 || expert >= n_experts_) {
      release_layer(layer);
      return make_error(Errc::argument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                            ": out of range 0.." + std::to_string(n_experts_ - 1));
    }
  }
  const int base = int(held_.size());
  for (const int expert : experts) {
    ++clock_;
    const std::uint64_t key = key_of(layer, expert);
    const int index = int(held_.size()) - base;
    if (auto it = index_.find(key); it != index_.end()) {
      Slot& s = slots_[std::size_t(it->second)];
      SlotState state;
      {
        std::lock_guard lock(mutex_);
        state = s.state;
      }
      if (state != SlotState::failed) {  // ready, or a prefetch still in flight
        ++s.pins;
        s.last_use = clock_;
        ++stats_.hits;
        held_.push_back(Held{layer, expert, it->second, index, false});
        continue;
      }
      index_.erase(it);  // a failed prefetch: read it again as a demand miss
      s.state = SlotState::empty;
    }
    ++stats_.misses;
    int slot = pick_victim();
    if (slot >= 0) {
      Slot& s = slots_[std::size_t(slot)];
      if (s.state != SlotState::empty) index_.erase(key_of(s.layer, s.expert));
      s.state = SlotState::empty;
    } else {
      slot = pick_private();
    }
    Slot& s = slots_[std::size_t(slot)];
    if (Status started = start_read(slot, layer, expert); !started) {
      release_layer(layer);
      return started;
    }
    s.pins = 1;
    s.last_use = clock_;
    if (std::size_t(slot) < capacity_) index_.emplace(key, slot);
    held_.push_back(Held{layer, expert, slot, index, false});
  }
  return ok();
}

void LocalExpertSource::prefetch(int layer, std::span<const int> experts) {
  if (readers_.empty() || capacity_ == 0 || layer < 0 || layer >= n_layers_ || !moe_layer_[std::size_t(layer)]) {
    return;
  }
  for (const int expert : experts) {
    if (expert < 0 || expert >= n_experts_) continue;
    const std::uint64_t key = key_of(layer, expert);
    if (index_.contains(key)) continue;  // resident, in flight, or failed (a demand retries it)
    const int slot = pick_victim();
    if (slot < 0) return;  // everything pinned or busy: drop the rest
    Slot& s = slots_[std::size_t(slot)];
    if (s.state != SlotState::empty) index_.erase(key_of(s.layer, s.expert));
    s.state = SlotState::empty;
    // Newest in LRU order, so the next layer's demand finds it before anything evicts it.
    s.last_use = ++clock_;
    (void)start_read(slot, layer, expert);  // cannot fail with readers: the read is only queued
    index_.emplace(key, slot);
    ++stats_.prefetch_issued;
  }
}

Result<ExpertView> LocalExpertSource::view_of(const Slot& s) const {
  if (s.state == SlotState::failed) {
    return std::unexpected(s.error ? *s.error
                                   : Error{Errc::io, "expert " + std::to_string(s.expert) + " of layer " +
                                                         std::to_string(s.layer) + ": read failed"});
  }
  return make_expert_view(s.buffer.span().first(banks_.record_bytes()), geometry_);
}

Result<ExpertView> LocalExpertSource::acquire(int layer, int expert) {
  for (const Held& h : held_) {
    if (h.layer != layer || h.expert != expert) continue;
    Slot& s = slots_[std::size_t(h.slot)];
    std::unique_lock lock(mutex_);
    if (s.state == SlotState::in_flight) {
      const auto start = std::chrono::steady_clock::now();
      landed_cv_.wait(lock, [&] { return slots_[std::size_t(h.slot)].state != SlotState::in_flight; });
      stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return view_of(slots_[std::size_t(h.slot)]);
  }
  return make_error(Errc::argument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                        ": acquired without a request");
}

Result<ReadyExpert> LocalExpertSource::acquire_next(int layer) {
  std::unique_lock lock(mutex_);
  bool waited = false;
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    // Among this layer's records not handed out yet: the earliest landed one.
    Held* best = nullptr;
    bool pending = false;
    for (Held& h : held_) {
      if (h.layer != layer || h.returned) continue;
      pending = true;
      const Slot& s = slots_[std::size_t(h.slot)];
      if (s.state == SlotState::in_flight) continue;
      if (!best || s.landed < slots_[std::size_t(best->slot)].landed) best = &h;
    }
    if (!pending) {
      return make_error(Errc::argument, "acquire_next on layer " + std::to_string(layer) +
                                            ": no record left in the current request");
    }
    if (best) {
      if (waited) {
        stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      best->returned = true;
      auto view = view_of(slots_[std::size_t(best->slot)]);
      if (!view) return std::unexpected(view.error());
      return ReadyExpert{best->index, *view};
    }
    if (!waited) start = std::chrono::steady_clock::now();
    waited = true;
    landed_cv_.wait(lock);
  }
}

void LocalExpertSource::release_layer(int layer) {
  std::size_t kept = 0;
  for (const Held& h : held_) {
    if (h.layer != layer) {
      held_[kept++] = h;
      continue;
    }
    Slot& s = slots_[std::size_t(h.slot)];
    --s.pins;
    if (std::size_t(h.slot) < capacity_ && s.pins == 0) {
      std::lock_guard lock(mutex_);
      if (s.state == SlotState::failed) {  // never serve a failed read from the cache
        index_.erase(key_of(s.layer, s.expert));
        s.state = SlotState::empty;
      }
    }
  }
  held_.resize(kept);
}

ExpertSourceStats LocalExpertSource::stats() const {
  ExpertSourceStats s = stats_;
  s.bytes_read = bytes_read_.load();
  return s;
}

}  // namespace waste
