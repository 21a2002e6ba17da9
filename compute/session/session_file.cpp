#include "compute/session/session_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "compute/api/engine.hpp"

namespace waste::session {

// The file is little-endian; every target we build for is too, so fields are memcpy'd.
static_assert(std::endian::native == std::endian::little, "session I/O assumes a little-endian host");
static_assert(sizeof(SessionHeader) == kHeaderBytes);

namespace {

std::uint32_t u32(int v) { return static_cast<std::uint32_t>(v); }

std::uint64_t conv_floats(const ModelConfig& c) {
  return 3ull * std::uint64_t(c.kda_channels()) * std::uint64_t(std::max(c.conv_k - 1, 0));
}
std::uint64_t kda_s_floats(const ModelConfig& c) {
  return std::uint64_t(c.kda_heads) * std::uint64_t(c.kda_dim) * std::uint64_t(c.kda_dim);
}
std::uint64_t latent_width(const ModelConfig& c) { return std::uint64_t(c.kv_lora) + std::uint64_t(c.qk_rope); }

// GLM's DSA indexer state of one MLA layer at `pos` tokens: the keys of the pos / kpool complete
// pools, then the k rows and the gate rows of the pos % kpool tokens of the pool being filled.
std::uint64_t index_floats(const ModelConfig& c, std::uint64_t pos) {
  if (!c.has_indexer() || c.index_kpool <= 0) return 0;
  const std::uint64_t kp = std::uint64_t(c.index_kpool), d = std::uint64_t(c.index_head_dim);
  return (pos / kp + 2 * (pos % kp)) * d;
}

// The three parts of index_floats in a KpoolIndexerState's buffer ([pools][D] keys, then
// [kpool][D] k, then [kpool][D] gate).
struct IndexParts {
  std::size_t keys = 0, k_at = 0, gate_at = 0, tail = 0;
};
IndexParts index_parts(const ModelConfig& c, std::size_t buffer_floats, std::size_t pos) {
  const std::size_t kp = std::size_t(c.index_kpool), d = std::size_t(c.index_head_dim);
  const std::size_t max_pools = buffer_floats / d - 2 * kp;
  return IndexParts{pos / kp * d, max_pools * d, (max_pools + kp) * d, pos % kp * d};
}

// DeepSeek-V4.1's CSA2 state of one layer at `pos` tokens: the window ring (sliding_window x
// head_dim, whole), then on a KV-source layer the pos / ratio complete groups' latents
// [groups][head_dim], their index keys [groups][index_head_dim] (with any index source), and
// the group being filled: ratio kv rows then ratio gate rows of head_dim (whole).
struct CsaParts {
  std::uint64_t window = 0, latents = 0, keys = 0, tail = 0;
  [[nodiscard]] std::uint64_t floats() const { return window + latents + keys + tail; }
};
bool is_kv_source(const ModelConfig& c, int L) {
  return std::find(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end(), L) != c.kv_source_layer_ids.end();
}
CsaParts csa_parts(const ModelConfig& c, int L, std::uint64_t pos) {
  CsaParts p;
  const std::uint64_t hd = std::uint64_t(c.head_dim);
  p.window = std::uint64_t(c.sliding_window) * hd;
  if (is_kv_source(c, L)) {
    const std::uint64_t ratio = std::uint64_t(c.compress_ratios[std::size_t(L)]), groups = pos / ratio;
    p.latents = groups * hd;
    p.keys = c.index_source_layer_ids.empty() ? 0 : groups * std::uint64_t(c.index_head_dim);
    p.tail = 2 * ratio * hd;
  }
  return p;
}
// Where the parts sit in a Csa2Source's buffer ([max_groups][hd] latents, [max_groups][id]
// keys, then the 2 x ratio x hd tail): the keys' and the tail's offsets.
struct CsaOffsets {
  std::size_t keys_at = 0, tail_at = 0;
};
CsaOffsets csa_offsets(const ModelConfig& c, const forward::Csa2Source& src) {
  const std::size_t hd = std::size_t(c.head_dim), id = src.has_index_keys() ? std::size_t(c.index_head_dim) : 0;
  const std::size_t tail = 2 * std::size_t(src.ratio()) * hd;
  const std::size_t max_groups = (src.buffer().size() - tail) / (hd + id);
  return CsaOffsets{max_groups * hd, max_groups * (hd + id)};
}

// Sequential writer/reader over a byte buffer.
class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out) {}
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void floats(std::span<const float> v) { raw(v.data(), v.size_bytes()); }

 private:
  std::vector<std::byte>& out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  std::int32_t i32() {
    std::int32_t v = 0;
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  void floats(std::span<float> out) {
    std::memcpy(out.data(), in_.data() + at_, out.size_bytes());
    at_ += out.size_bytes();
  }
  void skip(std::uint64_t n) { at_ += n; }
  [[nodiscard]] std::uint64_t at() const { return at_; }

 private:
  std::span<const std::byte> in_;
  std::uint64_t at_ = 0;
};

SessionHeader read_header(std::span<const std::byte> bytes) {
  SessionHeader h;
  std::memcpy(&h, bytes.data(), kHeaderBytes);
  return h;
}

}  // namespace

namespace {
// Engram models: the n-gram look-back, max_ngram_size - 1 compressed ids (int32, newest first).
std::uint64_t engram_history_ints(const ModelConfig& c) {
  return c.uses_engram() ? std::uint64_t(c.engram_max_ngram_size - 1) : 0;
}
}  // namespace

SessionHeader make_header(const ModelConfig& c, const model::RunState& state) {
  SessionHeader h;
  h.n_layers = u32(c.n_layers);
  h.hidden = u32(c.hidden);
  h.kda_heads = u32(c.kda_heads);
  h.kda_dim = u32(c.kda_dim);
  h.conv_k = u32(c.conv_k);
  h.n_heads = u32(c.n_heads);
  h.qk_nope = u32(c.qk_nope);
  h.qk_rope = u32(c.qk_rope);
  h.v_head = u32(c.v_head);
  h.attn_res_block = u32(c.attn_res_block);
  h.pos = u32(state.position());
  h.n_blockres = c.attn_res_block > 0 ? u32(state.n_blocks()) : 0;
  h.hc_mult = u32(c.hc_mult);
  h.reserved = c.n_csa_layers() > 0 ? u32(c.head_dim) : 0;  // DeepSeek-V4.1: head_dim
  return h;
}

std::uint64_t session_bytes(const ModelConfig& c, const SessionHeader& h) {
  std::uint64_t n = kHeaderBytes;
  for (int L = 0; L < c.n_layers; ++L) {
    if (c.is_csa(L)) {
      n += sizeof(std::int32_t) + csa_parts(c, L, h.pos).floats() * sizeof(float);
    } else if (c.is_kda(L)) {
      n += (kda_s_floats(c) + conv_floats(c)) * sizeof(float);
    } else {
      n += sizeof(std::int32_t) + std::uint64_t(h.pos) * latent_width(c) * sizeof(float);
      n += index_floats(c, h.pos) * sizeof(float);
    }
  }
  if (c.attn_res_block > 0) n += std::uint64_t(h.n_blockres) * std::uint64_t(c.hidden) * sizeof(float);
  n += std::uint64_t(c.stream_width()) * sizeof(float);  // x: hc_mult streams under mHC
  n += engram_history_ints(c) * sizeof(std::int32_t);     // Engram: the n-gram look-back
  return n;
}

std::uint64_t max_session_bytes(const ModelConfig& c, const model::RunState& state) {
  SessionHeader h = make_header(c, state);
  h.pos = u32(state.ctx_tokens());
  h.n_blockres = c.attn_res_block > 0 ? u32(state.max_blocks()) : 0;
  return session_bytes(c, h);
}

std::vector<std::byte> encode(const ModelConfig& c, const model::RunState& state) {
  const SessionHeader h = make_header(c, state);
  std::vector<std::byte> out;
  out.reserve(session_bytes(c, h));
  Writer w(out);
  w.raw(&h, sizeof h);
  const std::size_t pos = h.pos;
  for (int L = 0; L < c.n_layers; ++L) {
    if (c.is_csa(L)) {
      const std::int32_t n_kv = static_cast<std::int32_t>(pos);
      w.raw(&n_kv, sizeof n_kv);
      w.floats(state.csa_window(L).buffer());
      if (const forward::Csa2Source* src = state.csa_source(L)) {
        const CsaParts p = csa_parts(c, L, pos);
        const CsaOffsets o = csa_offsets(c, *src);
        w.floats(src->buffer().first(p.latents));
        w.floats(src->buffer().subspan(o.keys_at, p.keys));
        w.floats(src->buffer().subspan(o.tail_at, p.tail));
      }
    } else if (c.is_kda(L)) {
      w.floats(state.kda_state(L));
      // The in-memory rings use the file's order already (q, k, v; [C][K-1], oldest first).
      for (auto ring : {model::ConvRing::q, model::ConvRing::k, model::ConvRing::v}) w.floats(state.conv_ring(L, ring));
    } else {
      const std::int32_t n_kv = static_cast<std::int32_t>(pos);
      w.raw(&n_kv, sizeof n_kv);
      w.floats(state.latent_cache(L).first(pos * std::size_t(state.latent_width())));
      if (state.has_indexer(L)) {
        const std::span<const float> buf = state.indexer_state(L).buffer();
        const IndexParts p = index_parts(c, buf.size(), pos);
        w.floats(buf.first(p.keys));
        w.floats(buf.subspan(p.k_at, p.tail));
        w.floats(buf.subspan(p.gate_at, p.tail));
      }
    }
  }
  if (c.attn_res_block > 0) w.floats(state.blocks().first(std::size_t(h.n_blockres) * std::size_t(c.hidden)));
  w.floats(state.hidden());
  if (state.has_ngram_history()) {
    const std::span<const std::int32_t> recent = state.ngram_history().recent();
    w.raw(recent.data(), recent.size_bytes());
  }
  return out;
}

namespace {

// The header checks (length, magic, version, shape, pos, blocks): what validate says first.
Status check_header(std::span<const std::byte> bytes, const ModelConfig& c, const model::RunState& state,
                    const std::string& origin) {
  const std::string where = "session " + origin + ": ";
  auto refuse = [&](const std::string& what) { return make_error(Errc::format, where + what); };
  if (bytes.size() < kHeaderBytes) {
    return refuse("file of " + std::to_string(bytes.size()) + " bytes is shorter than the 64-byte header");
  }
  const SessionHeader h = read_header(bytes);
  if (h.magic != kMagic) return refuse("not a WASTE session (bad magic)");
  if (h.version != kVersion) return refuse("version " + std::to_string(h.version) + " != supported 1");
  const SessionHeader want = make_header(c, state);
  const struct {
    const char* name;
    std::uint32_t file, model;
  } fields[] = {{"n_layers", h.n_layers, want.n_layers},   {"hidden", h.hidden, want.hidden},
                {"kda_heads", h.kda_heads, want.kda_heads}, {"kda_dim", h.kda_dim, want.kda_dim},
                {"conv_k", h.conv_k, want.conv_k},         {"n_heads", h.n_heads, want.n_heads},
                {"qk_nope", h.qk_nope, want.qk_nope},       {"qk_rope", h.qk_rope, want.qk_rope},
                {"v_head", h.v_head, want.v_head},          {"attn_res_block", h.attn_res_block, want.attn_res_block},
                {"hc_mult", h.hc_mult, want.hc_mult},       {"head_dim", h.reserved, want.reserved}};
  for (const auto& f : fields) {
    if (f.file != f.model) {
      return refuse(std::string(f.name) + " " + std::to_string(f.file) + " != model " + std::to_string(f.model));
    }
  }
  // Our state bounds the position for every model (not only MLA ones), so a larger pos could
  // never be continued.
  if (h.pos >= std::uint32_t(std::numeric_limits<std::int32_t>::max()) || h.pos > std::uint32_t(state.ctx_tokens())) {
    return refuse("pos " + std::to_string(h.pos) + " exceeds the context of " + std::to_string(state.ctx_tokens()) +
                  " tokens");
  }
  const std::uint32_t max_blocks = c.attn_res_block > 0 ? std::uint32_t(state.max_blocks()) : 0;
  if (h.n_blockres > max_blocks) {
    return refuse("n_blockres " + std::to_string(h.n_blockres) + " exceeds " + std::to_string(max_blocks));
  }
  return ok();
}

}  // namespace

Status validate(std::span<const std::byte> bytes, const ModelConfig& c, const model::RunState& state,
                const std::string& origin) {
  WASTE_TRY(check_header(bytes, c, state, origin));
  const std::string where = "session " + origin + ": ";
  auto refuse = [&](const std::string& what) { return make_error(Errc::format, where + what); };
  const SessionHeader h = read_header(bytes);
  const std::uint64_t expected = session_bytes(c, h);
  if (bytes.size() != expected) {
    return refuse("size " + std::to_string(bytes.size()) + " bytes != expected " + std::to_string(expected) +
                  " for pos " + std::to_string(h.pos));
  }
  // Pre-walk the body: every MLA layer's n_kv must equal pos.
  Reader r(bytes);
  r.skip(kHeaderBytes);
  for (int L = 0; L < c.n_layers; ++L) {
    if (c.is_csa(L)) {
      const std::int32_t n_kv = r.i32();
      if (n_kv < 0 || std::uint32_t(n_kv) != h.pos) {
        return refuse("layer " + std::to_string(L) + ": n_kv " + std::to_string(n_kv) + " != pos " +
                      std::to_string(h.pos));
      }
      r.skip(csa_parts(c, L, h.pos).floats() * sizeof(float));
    } else if (c.is_kda(L)) {
      r.skip((kda_s_floats(c) + conv_floats(c)) * sizeof(float));
    } else {
      const std::int32_t n_kv = r.i32();
      if (n_kv < 0 || std::uint32_t(n_kv) != h.pos) {
        return refuse("layer " + std::to_string(L) + ": n_kv " + std::to_string(n_kv) + " != pos " +
                      std::to_string(h.pos));
      }
      r.skip(std::uint64_t(n_kv) * latent_width(c) * sizeof(float));
      r.skip(index_floats(c, std::uint64_t(n_kv)) * sizeof(float));
    }
  }
  if (c.attn_res_block > 0) r.skip(std::uint64_t(h.n_blockres) * std::uint64_t(c.hidden) * sizeof(float));
  r.skip(std::uint64_t(c.stream_width()) * sizeof(float));
  // Engram's look-back: each entry a compressed id of the model's map or -1 (the look-back stops).
  for (std::uint64_t i = 0; i < engram_history_ints(c); ++i) {
    const std::int32_t id = r.i32();
    if (id < -1 || id >= c.engram_compressed_vocab_size) {
      return refuse("engram history entry " + std::to_string(i) + ": id " + std::to_string(id) +
                    " is outside -1.." + std::to_string(c.engram_compressed_vocab_size - 1));
    }
  }
  return ok();
}

Status decode_into(std::span<const std::byte> bytes, const ModelConfig& c, model::RunState& state,
                   const std::string& origin) {
  WASTE_TRY(validate(bytes, c, state, origin));
  const SessionHeader h = read_header(bytes);
  state.reset();  // slots past pos and blocks past n_blockres read as a fresh state's zeros
  Reader r(bytes);
  r.skip(kHeaderBytes);
  for (int L = 0; L < c.n_layers; ++L) {
    if (c.is_csa(L)) {
      (void)r.i32();
      forward::Csa2Window& window = state.csa_window(L);
      r.floats(window.buffer());
      window.set_tokens(int(h.pos));
      if (forward::Csa2Source* src = state.csa_source(L)) {
        const CsaParts p = csa_parts(c, L, h.pos);
        const CsaOffsets o = csa_offsets(c, *src);
        r.floats(src->buffer().first(p.latents));
        r.floats(src->buffer().subspan(o.keys_at, p.keys));
        r.floats(src->buffer().subspan(o.tail_at, p.tail));
        src->set_tokens(int(h.pos));
      }
    } else if (c.is_kda(L)) {
      r.floats(state.kda_state(L));
      for (auto ring : {model::ConvRing::q, model::ConvRing::k, model::ConvRing::v}) r.floats(state.conv_ring(L, ring));
    } else {
      (void)r.i32();
      r.floats(state.latent_cache(L).first(std::size_t(h.pos) * std::size_t(state.latent_width())));
      if (state.has_indexer(L)) {
        forward::KpoolIndexerState& index = state.indexer_state(L);
        const std::span<float> buf = index.buffer();
        const IndexParts p = index_parts(c, buf.size(), h.pos);
        r.floats(buf.first(p.keys));
        r.floats(buf.subspan(p.k_at, p.tail));
        r.floats(buf.subspan(p.gate_at, p.tail));
        index.set_tokens(int(h.pos));
      }
    }
  }
  if (c.attn_res_block > 0) {
    r.floats(state.blocks().first(std::size_t(h.n_blockres) * std::size_t(c.hidden)));
    state.set_n_blocks(int(h.n_blockres));
  }
  r.floats(state.hidden());
  if (state.has_ngram_history()) {
    std::vector<std::int32_t> recent(engram_history_ints(c));
    for (std::int32_t& id : recent) id = r.i32();
    WASTE_TRY(state.ngram_history().restore(recent));
  }
  state.set_position(int(h.pos));
  return ok();
}

namespace {

std::string errno_text() { return std::strerror(errno); }

Status write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, "session " + path + ": write failed: " + errno_text());
    }
    done += std::size_t(n);
  }
  return ok();
}

// Closes the descriptor and removes the temp file unless released.
struct TempFile {
  int fd = -1;
  std::filesystem::path path;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep) {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  }
};

}  // namespace

Status save(const Engine& engine, const std::filesystem::path& path) {
  static std::atomic<std::uint64_t> seq{0};
  // A state a failed pass left half-advanced is not a conversation worth keeping.
  if (Status usable = engine.run_state().check_usable(); !usable) {
    return std::unexpected(usable.error().with_context("session " + path.string()));
  }
  const std::vector<std::byte> bytes = encode(engine.config(), engine.run_state());
  TempFile tmp;
  tmp.path = path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seq++);
  // 0600: a session is the conversation itself (every token's state); only its owner reads it.
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (tmp.fd < 0) return make_error(Errc::io, "session " + tmp.path.string() + ": cannot create: " + errno_text());
  WASTE_TRY(write_all(tmp.fd, bytes, tmp.path.string()));
  if (::fsync(tmp.fd) != 0) return make_error(Errc::io, "session " + tmp.path.string() + ": fsync: " + errno_text());
  if (::close(tmp.fd) != 0) {
    tmp.fd = -1;
    return make_error(Errc::io, "session " + tmp.path.string() + ": close: " + errno_text());
  }
  tmp.fd = -1;
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    return make_error(Errc::io, "session " + path.string() + ": rename: " + errno_text());
  }
  tmp.keep = true;
  // Make the rename itself durable; a failure here does not undo a completed save.
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return ok();
}

Status load(Engine& engine, const std::filesystem::path& path) {
  const std::string name = "session " + path.string();
  // O_NONBLOCK: a FIFO must not block the open (regular files ignore the flag).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return make_error(Errc::io, name + ": cannot open: " + errno_text());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Size first, from the descriptor that is read: nothing past the largest session this model
  // and context can hold is ever allocated (a 64 GiB sparse file, /dev/zero, a FIFO).
  struct stat st{};
  if (::fstat(fd, &st) != 0) return make_error(Errc::io, name + ": cannot read its size: " + errno_text());
  if (!S_ISREG(st.st_mode)) return make_error(Errc::format, name + ": not a regular file");
  const std::uint64_t limit = max_session_bytes(engine.config(), engine.run_state());
  if (std::uint64_t(st.st_size) > limit) {
    // Another model's session is named as such (by its header), not only as too large.
    std::byte head[kHeaderBytes];
    if (::pread(fd, head, sizeof head, 0) == ssize_t(sizeof head)) {
      WASTE_TRY(check_header(head, engine.config(), engine.run_state(), path.string()));
    }
    return make_error(Errc::format, name + ": " + std::to_string(st.st_size) + " bytes exceed the largest session of " +
                                        std::to_string(limit) + " bytes this model holds at a context of " +
                                        std::to_string(engine.run_state().ctx_tokens()) + " tokens");
  }
  std::vector<std::byte> bytes(std::size_t(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(Errc::io, name + ": read failed: " + errno_text());
    if (n == 0) break;   // shrank meanwhile: validate reports the size it has
    done += std::size_t(n);
  }
  bytes.resize(done);
  // Everything is in memory and checked before the engine changes, so a refusal leaves it as is.
  WASTE_TRY(validate(bytes, engine.config(), engine.run_state(), path.string()));
  engine.reset();  // drops the logits of the previous sequence
  return decode_into(bytes, engine.config(), engine.run_state(), path.string());
}

}  // namespace waste::session
