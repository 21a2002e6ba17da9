// Session files (reference §6.1): exact layout and size, a saved-and-loaded sequence continues
// exactly like an uninterrupted one, and every refusal leaves the live state untouched.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compute/api/engine.hpp"
#include "compute/session/session_file.hpp"
#include "test_forward_fixtures.hpp"

// REQUIRE that a Result/Status holds a value, showing its error otherwise.
#define REQUIRE_OK(expr)                                          \
  do {                                                            \
    const auto& require_ok_ = (expr);                             \
    INFO((require_ok_ ? std::string() : require_ok_.error().message)); \
    REQUIRE(require_ok_);                                         \
  } while (0)

namespace waste {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Engine> open_preset(const std::string& preset, int ctx = 64) {
  EngineOptions options;
  options.model = test::synth_container(preset);
  options.threads = 2;
  options.ctx_tokens = ctx;
  auto engine = Engine::open(options);
  INFO((engine ? std::string() : engine.error().message));
  REQUIRE(engine);
  return std::move(*engine);
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "waste-session-XXXXXX").string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::vector<std::byte> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

void write_file(const fs::path& p, std::span<const std::byte> bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::uint32_t u32_at(std::span<const std::byte> b, std::size_t offset) {
  std::uint32_t v = 0;
  std::memcpy(&v, b.data() + offset, 4);
  return v;
}

float f32_at(std::span<const std::byte> b, std::size_t offset) {
  float v = 0;
  std::memcpy(&v, b.data() + offset, 4);
  return v;
}

GenerateParams sampled(int n) {
  GenerateParams p;
  p.max_tokens = n;
  p.sampling = SamplingParams{0.9f, 0.95f, 0, 1234};
  p.eos_token = -2;
  return p;
}

// A copy of session bytes whose header claims another layer count.
std::vector<std::byte> bytes_with_layers(std::vector<std::byte> bytes, std::uint32_t n_layers) {
  std::memcpy(bytes.data() + 8, &n_layers, 4);
  return bytes;
}

const std::vector<int> kTurn1 = {1, 17, 42, 99, 5};
const std::vector<int> kTurn2 = {7, 8, 200};

}  // namespace

TEST_CASE("Session file has the reference layout, byte for byte", "[compute][session]") {
  auto engine = open_preset("tiny");
  const ModelConfig& c = engine->config();
  REQUIRE_OK(engine->eval(kTurn1));
  TempDir dir;
  const fs::path file = dir.path / "s.bin";
  REQUIRE_OK(session::save(*engine, file));
  const auto bytes = read_file(file);

  // Header: 16 little-endian u32.
  const std::uint32_t expected_header[14] = {0x53414457u, 1u, 4u, 128u, 4u, 32u, 4u, 4u, 16u, 8u, 16u, 0u,
                                             std::uint32_t(kTurn1.size()), 0u};
  for (int i = 0; i < 14; ++i) CHECK(u32_at(bytes, std::size_t(i) * 4) == expected_header[i]);
  CHECK(u32_at(bytes, 56) == 0u);
  CHECK(u32_at(bytes, 60) == 0u);

  // Body: tiny is KDA, KDA, MLA, KDA (kda_layers [1, 2, 4]).
  const std::size_t kda_floats = 4 * 32 * 32 + 3 * 128 * 3;
  const std::size_t pos = kTurn1.size();
  const std::size_t expected_size = 64 + 3 * kda_floats * 4 + (4 + pos * (32 + 8) * 4) + 128 * 4;
  REQUIRE(bytes.size() == expected_size);
  const model::RunState& st = engine->run_state();
  std::size_t at = 64;
  for (int L = 0; L < 4; ++L) {
    if (c.is_kda(L)) {
      CHECK(std::memcmp(bytes.data() + at, st.kda_state(L).data(), st.kda_state(L).size_bytes()) == 0);
      at += st.kda_state(L).size_bytes();
      for (auto ring : {model::ConvRing::q, model::ConvRing::k, model::ConvRing::v}) {
        CHECK(std::memcmp(bytes.data() + at, st.conv_ring(L, ring).data(), st.conv_ring(L, ring).size_bytes()) == 0);
        at += st.conv_ring(L, ring).size_bytes();
      }
    } else {
      CHECK(u32_at(bytes, at) == pos);
      at += 4;
      CHECK(std::memcmp(bytes.data() + at, st.latent_cache(L).data(), pos * 40 * 4) == 0);
      at += pos * 40 * 4;
    }
  }
  CHECK(std::memcmp(bytes.data() + at, st.hidden().data(), 128 * 4) == 0);
  CHECK(f32_at(bytes, at) == st.hidden()[0]);
  CHECK(at + 128 * 4 == bytes.size());
  // Atomic write left no temp file behind.
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
}

TEST_CASE("A saved and loaded sequence continues exactly like an uninterrupted one", "[compute][session]") {
  TempDir dir;
  const fs::path file = dir.path / "chat.session";
  for (const char* preset : {"tiny", "tiny-k3", "tiny-glm"}) {
    INFO(preset);
    auto a = open_preset(preset);
    auto first = a->generate(kTurn1, sampled(6));
    REQUIRE_OK(first);
    REQUIRE_OK(session::save(*a, file));
    if (std::string(preset) == "tiny-k3") {
      CHECK(a->run_state().n_blocks() > 0);  // the AttnRes block history is part of the file
      CHECK(u32_at(read_file(file), 52) == std::uint32_t(a->run_state().n_blocks()));
    }
    if (std::string(preset) == "tiny-glm") {
      // mHC: the header names 4 streams and the file ends with all of them (4 x hidden f32).
      const auto bytes = read_file(file);
      CHECK(u32_at(bytes, 56) == 4u);
      const int hid = a->config().hidden;
      REQUIRE(a->run_state().hidden().size() == std::size_t(4 * hid));
      CHECK(std::memcmp(bytes.data() + bytes.size() - std::size_t(4 * hid) * 4, a->run_state().hidden().data(),
                        std::size_t(4 * hid) * 4) == 0);
      // The streams differ from each other (a copy of one would not be the 4 streams).
      const auto x = a->run_state().hidden();
      CHECK(std::memcmp(x.data(), x.data() + hid, std::size_t(hid) * 4) != 0);
    }
    auto uninterrupted = a->generate(kTurn2, sampled(8));
    REQUIRE_OK(uninterrupted);

    // A fresh engine that has seen something else, then loads.
    auto b = open_preset(preset);
    REQUIRE_OK(b->eval(std::vector<int>{3, 3, 3}));
    Status loaded = session::load(*b, file);
    INFO((loaded ? std::string() : loaded.error().message));
    REQUIRE(loaded);
    CHECK(b->position() == int(kTurn1.size() + first->tokens.size()));
    auto resumed = b->generate(kTurn2, sampled(8));
    REQUIRE_OK(resumed);
    CHECK(resumed->tokens == uninterrupted->tokens);
    CHECK(std::vector<float>(b->logits().begin(), b->logits().end()) ==
          std::vector<float>(a->logits().begin(), a->logits().end()));

    // Without the load the continuation differs (the state is what carries the conversation).
    b->reset();
    auto cold = b->generate(kTurn2, sampled(8));
    REQUIRE_OK(cold);
    CHECK(std::vector<float>(b->logits().begin(), b->logits().end()) !=
          std::vector<float>(a->logits().begin(), a->logits().end()));
  }
}

TEST_CASE("Session load refuses another model and leaves the live state untouched", "[compute][session]") {
  TempDir dir;
  const fs::path k3_file = dir.path / "k3.session";
  auto k3 = open_preset("tiny-k3");
  REQUIRE_OK(k3->eval(kTurn1));
  REQUIRE_OK(session::save(*k3, k3_file));

  auto engine = open_preset("tiny");
  REQUIRE_OK(engine->eval(kTurn2));
  const auto before = session::encode(engine->config(), engine->run_state());
  const std::vector<float> logits_before(engine->logits().begin(), engine->logits().end());

  Status refused = session::load(*engine, k3_file);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::format);
  CHECK(refused.error().message == "session " + k3_file.string() + ": n_layers 6 != model 4");

  // One field patched: the message names it.
  const fs::path own = dir.path / "own.session";
  REQUIRE_OK(session::save(*engine, own));
  auto bytes = read_file(own);
  const std::uint32_t eight = 8;
  std::memcpy(bytes.data() + 16, &eight, 4);  // kda_heads
  const fs::path patched = dir.path / "patched.session";
  write_file(patched, bytes);
  refused = session::load(*engine, patched);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "session " + patched.string() + ": kda_heads 8 != model 4");

  CHECK(session::encode(engine->config(), engine->run_state()) == before);
  CHECK(engine->position() == int(kTurn2.size()));
  // The logits survive too: generation continues from them with an empty prompt.
  CHECK(std::vector<float>(engine->logits().begin(), engine->logits().end()) == logits_before);
  GenerateParams p;
  p.max_tokens = 1;
  CHECK(engine->generate({}, p));
}

TEST_CASE("Truncated, padded and inconsistent session files are refused", "[compute][session]") {
  TempDir dir;
  auto engine = open_preset("tiny");
  REQUIRE_OK(engine->eval(kTurn1));
  const fs::path good = dir.path / "good.session";
  REQUIRE_OK(session::save(*engine, good));
  const auto bytes = read_file(good);
  REQUIRE_OK(engine->eval(kTurn2));
  const auto before = session::encode(engine->config(), engine->run_state());
  const std::string expected_size = std::to_string(bytes.size());

  auto refuse = [&](std::vector<std::byte> content, const std::string& what) {
    const fs::path file = dir.path / "bad.session";
    write_file(file, content);
    Status s = session::load(*engine, file);
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::format);
    CHECK(s.error().message == "session " + file.string() + ": " + what);
    CHECK(session::encode(engine->config(), engine->run_state()) == before);
  };

  auto truncated = bytes;
  truncated.resize(bytes.size() - 4);
  refuse(truncated, "size " + std::to_string(bytes.size() - 4) + " bytes != expected " + expected_size + " for pos 5");
  auto padded = bytes;
  padded.push_back(std::byte{0});
  refuse(padded, "size " + std::to_string(bytes.size() + 1) + " bytes != expected " + expected_size + " for pos 5");
  refuse(std::vector<std::byte>(bytes.begin(), bytes.begin() + 10),
         "file of 10 bytes is shorter than the 64-byte header");
  auto bad_magic = bytes;
  bad_magic[0] = std::byte{0};
  refuse(bad_magic, "not a WASTE session (bad magic)");
  auto bad_version = bytes;
  bad_version[4] = std::byte{2};
  refuse(bad_version, "version 2 != supported 1");
  // MLA layer 2's n_kv sits after two KDA layers.
  auto bad_nkv = bytes;
  const std::size_t nkv_at = 64 + 2 * (4 * 32 * 32 + 3 * 128 * 3) * 4;
  REQUIRE(u32_at(bytes, nkv_at) == 5u);
  const std::int32_t four = 4;
  std::memcpy(bad_nkv.data() + nkv_at, &four, 4);
  refuse(bad_nkv, "layer 2: n_kv 4 != pos 5");
  auto big_pos = bytes;
  const std::uint32_t pos = 65;  // ctx is 64
  std::memcpy(big_pos.data() + 48, &pos, 4);
  refuse(big_pos, "pos 65 exceeds the context of 64 tokens");

  const fs::path missing = dir.path / "missing.session";
  Status s = session::load(*engine, missing);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::io);
}

TEST_CASE("A session file is written 0600 whatever the umask", "[compute][session]") {
  // Hazard: sessions (the whole conversation's state) were created 0644, readable by every user.
  TempDir dir;
  auto engine = open_preset("tiny");
  REQUIRE_OK(engine->eval(kTurn1));
  const fs::path file = dir.path / "private.session";
  write_file(file, std::vector<std::byte>(8));
  REQUIRE(::chmod(file.c_str(), 0644) == 0);   // an older, world-readable file is replaced
  const mode_t old_mask = ::umask(022);
  const Status saved = session::save(*engine, file);
  ::umask(old_mask);
  REQUIRE_OK(saved);
  struct stat st{};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
}

TEST_CASE("A session file larger than the model can hold is refused before it is read", "[compute][session]") {
  // Hazard: load read the whole file into memory and only then compared its size.
  TempDir dir;
  auto engine = open_preset("tiny");
  REQUIRE_OK(engine->eval(kTurn1));
  const auto before = session::encode(engine->config(), engine->run_state());
  const std::uint64_t limit = session::max_session_bytes(engine->config(), engine->run_state());
  CHECK(limit > before.size());
  const fs::path huge = dir.path / "huge.session";
  REQUIRE_OK(session::save(*engine, huge));   // a valid header for this model, then 64 GiB of holes
  const std::uint64_t huge_bytes = std::uint64_t(1) << 36;   // 64 GiB, sparse: never allocated
  fs::resize_file(huge, huge_bytes);
  Status s = session::load(*engine, huge);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::format);
  CHECK(s.error().message == "session " + huge.string() + ": " + std::to_string(huge_bytes) +
                                 " bytes exceed the largest session of " + std::to_string(limit) +
                                 " bytes this model holds at a context of 64 tokens");
  // One byte over the limit: the same refusal, at the exact bound.
  fs::resize_file(huge, limit + 1);
  s = session::load(*engine, huge);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "session " + huge.string() + ": " + std::to_string(limit + 1) +
                                 " bytes exceed the largest session of " + std::to_string(limit) +
                                 " bytes this model holds at a context of 64 tokens");
  const fs::path fifo = dir.path / "fifo.session";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  s = session::load(*engine, fifo);   // no writer: must not block
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "session " + fifo.string() + ": not a regular file");
  const fs::path folder = dir.path / "folder.session";
  fs::create_directories(folder);
  s = session::load(*engine, folder);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "session " + folder.string() + ": not a regular file");
  // Another model's oversized file is named by its header first.
  auto other = bytes_with_layers(before, 9);
  write_file(huge, other);
  fs::resize_file(huge, huge_bytes);
  s = session::load(*engine, huge);
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "session " + huge.string() + ": n_layers 9 != model 4");
  CHECK(session::encode(engine->config(), engine->run_state()) == before);
}

}  // namespace waste
