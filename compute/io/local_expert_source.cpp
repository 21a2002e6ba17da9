#include "compute/io/local_expert_source.hpp"

#include <algorithm>
#include <chrono>
#include <string>

namespace waste {

Result<std::unique_ptr<LocalExpertSource>> LocalExpertSource::open(const ContainerInfo& info,
                                                                    LocalSourceOptions options) {
  auto banks = ExpertBanks::open(info.files.dir, info.manifest, info.n_codebooks,
                                 BankReadOptions{options.direct_io, options.verify_records});
  if (!banks) return std::unexpected(banks.error());
  return std::unique_ptr<LocalExpertSource>(
      new LocalExpertSource(std::move(*banks), info.geometry, info.manifest, options.cache_records));
}

LocalExpertSource::LocalExpertSource(ExpertBanks banks, ExpertGeometry geometry, const Manifest& manifest,
                                     std::size_t capacity)
    : banks_(std::move(banks)),
      geometry_(geometry),
      n_layers_(manifest.config.n_layers),
      n_experts_(manifest.config.n_experts) {
  moe_layer_.assign(std::size_t(n_layers_), false);
  for (const auto& [layer, bank] : manifest.banks) {
    if (layer >= 0 && layer < n_layers_) moe_layer_[std::size_t(layer)] = true;
  }
  // Buffers are allocated lazily on first use, so a large capacity costs nothing until filled.
  slots_.resize(capacity);
  index_.reserve(capacity);
  held_.reserve(std::size_t(std::max(manifest.config.top_k, 1)));
}

int LocalExpertSource::pick_victim() const {
  int victim = -1;
  for (int i = 0; i < int(slots_.size()); ++i) {
    const Slot& s = slots_[std::size_t(i)];
    if (s.pins > 0) continue;
    if (!s.valid) return i;
    if (victim < 0 || s.last_use < slots_[std::size_t(victim)].last_use) victim = i;
  }
  return victim;
}

Status LocalExpertSource::read_into(int layer, int expert, std::span<std::byte> buffer) {
  const auto start = std::chrono::steady_clock::now();
  Status read = banks_.read_record(layer, expert, buffer.first(banks_.record_bytes()));
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (read) stats_.bytes_read += banks_.record_bytes();
  return read;
}

Status LocalExpertSource::request(int layer, std::span<const int> experts) {
  if (layer < 0 || layer >= n_layers_ || !moe_layer_[std::size_t(layer)]) {
    return make_error(Errc::argument, "expert request for layer " + std::to_string(layer) + ", which has no experts");
  }
  const std::size_t record_bytes = banks_.record_bytes();
  for (const int expert : experts) {
    if (expert < 0 || expert >= n_experts_) {
      release_layer(layer);
      return make_error(Errc::argument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                            ": out of range 0.." + std::to_string(n_experts_ - 1));
    }
    ++clock_;
    const std::uint64_t key = key_of(layer, expert);
    if (auto it = index_.find(key); it != index_.end()) {
      Slot& s = slots_[std::size_t(it->second)];
      ++s.pins;
      s.last_use = clock_;
      ++stats_.hits;
      held_.push_back(Held{layer, expert, s.buffer.data(), it->second, -1});
      continue;
    }
    ++stats_.misses;
    const int victim = pick_victim();
    if (victim >= 0) {
      Slot& s = slots_[std::size_t(victim)];
      if (s.valid) index_.erase(s.key);
      s.valid = false;
      if (s.buffer.size() < record_bytes) s.buffer = AlignedBuffer(record_bytes);
      if (Status read = read_into(layer, expert, s.buffer.span()); !read) {
        release_layer(layer);
        return read;
      }
      s.valid = true;
      s.key = key;
      s.last_use = clock_;
      s.pins = 1;
      index_.emplace(key, victim);
      held_.push_back(Held{layer, expert, s.buffer.data(), victim, -1});
      continue;
    }
    // No cache (or all of it pinned): a private buffer, reused across layers.
    int p = 0;
    while (p < int(private_.size()) && private_used_[std::size_t(p)]) ++p;
    if (p == int(private_.size())) {
      private_.emplace_back(record_bytes);
      private_used_.push_back(false);
    }
    if (Status read = read_into(layer, expert, private_[std::size_t(p)].span()); !read) {
      release_layer(layer);
      return read;
    }
    private_used_[std::size_t(p)] = true;
    held_.push_back(Held{layer, expert, private_[std::size_t(p)].data(), -1, p});
  }
  return ok();
}

Result<ExpertView> LocalExpertSource::acquire(int layer, int expert) {
  for (const Held& h : held_) {
    if (h.layer == layer && h.expert == expert) {
      return make_expert_view(std::span<const std::byte>(h.data, banks_.record_bytes()), geometry_);
    }
  }
  return make_error(Errc::argument, "expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                                        ": acquired without a request");
}

void LocalExpertSource::release_layer(int layer) {
  std::size_t kept = 0;
  for (const Held& h : held_) {
    if (h.layer != layer) {
      held_[kept++] = h;
      continue;
    }
    if (h.slot >= 0) {
      --slots_[std::size_t(h.slot)].pins;
    } else {
      private_used_[std::size_t(h.private_index)] = false;
    }
  }
  held_.resize(kept);
}

}  // namespace waste
