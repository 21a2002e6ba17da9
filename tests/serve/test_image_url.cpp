// image_url content parts in `waste serve`: data: URLs parsed and checked (remote URLs and local
// paths refused with the part named), and served through the vision tower: the same tokens as
// `waste run --image` on the same PNG and text; an image request batched with a text-only one and
// two different images with the same text each give exactly what they give alone.
#include <catch2/catch.hpp>

#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "cli/serve/data_url.hpp"
#include "cli/serve/http_server.hpp"
#include "cli/serve/openai_request.hpp"
#include "compute/vision/image_decode.hpp"
#include "tests/cli/cli_test_support.hpp"
#include "tests/serve/http_client.hpp"

namespace waste::serve {
namespace {

using nlohmann::json;

std::vector<std::uint8_t> png_bytes(int w, int h, int seed) {
  std::vector<std::uint8_t> px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      px.insert(px.end(), {std::uint8_t(3 * x + seed), std::uint8_t(5 * y), std::uint8_t((x ^ y) + 7 * seed)});
    }
  png_image p;
  std::memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  p.width = png_uint_32(w);
  p.height = png_uint_32(h);
  p.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_to_memory(&p, nullptr, &size, 0, px.data(), 0, nullptr));
  std::vector<std::uint8_t> out(size);
  REQUIRE(png_image_write_to_memory(&p, out.data(), &size, 0, px.data(), 0, nullptr));
  out.resize(size);
  return out;
}

std::string base64(std::span<const std::uint8_t> b) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < b.size(); i += 3) {
    const std::uint32_t v = std::uint32_t(b[i]) << 16 | (i + 1 < b.size() ? std::uint32_t(b[i + 1]) << 8 : 0) |
                            (i + 2 < b.size() ? b[i + 2] : 0);
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += i + 1 < b.size() ? a[(v >> 6) & 63] : '=';
    out += i + 2 < b.size() ? a[v & 63] : '=';
  }
  return out;
}

std::string data_url(std::span<const std::uint8_t> b, const std::string& type = "image/png") {
  return "data:" + type + ";base64," + base64(b);
}

json user_with_image(const std::string& url, const std::string& text) {
  return json{{"role", "user"},
              {"content", json::array({json{{"type", "image_url"}, {"image_url", {{"url", url}, {"detail", "auto"}}}},
                                       json{{"type", "text"}, {"text", text}}})}};
}

ApiError chat_error(const std::string& body) {
  auto r = parse_request(Endpoint::chat, body);
  REQUIRE_FALSE(r);
  CHECK(r.error().status == 400);
  return r.error();
}

std::string chat_body(const json& content, const char* role = "user") {
  return json{{"model", "m"}, {"messages", json::array({json{{"role", role}, {"content", content}}})}}.dump();
}

std::string image_part_body(const std::string& url) {
  return chat_body(json::array({json{{"type", "text"}, {"text", "look"}},
                                json{{"type", "image_url"}, {"image_url", {{"url", url}}}}}));
}

const std::string kFormat = std::string(WASTE_SOURCE_DIR) + "/configs/chat/kimi-k3.json";

// A served model: engine, scheduler and HTTP server in this process, on a free loopback port.
class Served {
 public:
  // `prefill_chunk`: tokens per pass (small: a prompt's media positions span several passes);
  // `prefix_cache`: the prefix cache's bound (0 = off).
  Served(const std::filesystem::path& model, bool with_vision, int prefill_chunk = 64, std::uint64_t prefix_cache = 0) {
    EngineOptions o;
    o.model = model;
    o.threads = 2;
    o.ctx_tokens = 256;
    auto engine = Engine::open(o);
    INFO((engine ? std::string() : engine.error().message));
    REQUIRE(engine);
    engine_ = std::move(*engine);
    auto tokenizer = Tokenizer::load(model);
    REQUIRE(tokenizer);
    tokenizer_.emplace(std::move(*tokenizer));
    auto format = ChatFormat::load(kFormat);
    REQUIRE(format);
    format_ = std::move(*format);
    ServeVision vision;
    if (with_vision) {
      auto encoder = vision::load_media_encoder(model, *tokenizer_, engine_->config().hidden);
      INFO((encoder ? std::string() : encoder.error().message));
      REQUIRE(encoder);
      encoder_.emplace(std::move(*encoder));
      vision = {&encoder_->tower, encoder_->tokens};
    }
    scheduler_.emplace(*engine_, *tokenizer_, SchedulerOptions{2, 8, prefill_chunk, prefix_cache}, vision.tower);
    ServeConfig config;
    config.port = 0;
    config.model_id = "m";
    server_.emplace(config, metrics_);
    REQUIRE(server_->start());
    server_->ready({&*scheduler_, &*tokenizer_, &format_, nullptr, vision});
  }
  ~Served() {
    if (server_) server_->stop();
    if (scheduler_) scheduler_->stop();
  }

  // POST /v1/chat/completions: status and body (0 and null when no answer came). No Catch
  // assertions here: client threads call it.
  std::pair<int, json> chat(const json& body) const {
    const http_test::HttpAnswer res = http_test::post(server_->port(), "/v1/chat/completions", body.dump());
    if (res.status == 0) return {0, json()};
    return {res.status, json::parse(res.body, nullptr, false)};
  }

  [[nodiscard]] const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<Engine> engine_;
  std::optional<Tokenizer> tokenizer_;
  ChatFormat format_;
  std::optional<vision::MediaEncoder> encoder_;
  Metrics metrics_;
  std::optional<Scheduler> scheduler_;
  std::optional<HttpServer> server_;
};

json greedy(json messages, int max_tokens = 6) {
  return json{{"model", "m"}, {"messages", std::move(messages)}, {"temperature", 0}, {"max_tokens", max_tokens},
              {"logprobs", true}, {"top_logprobs", 0}};
}

// The answer's tokens as bytes, with their logprobs (exact floats, as the server printed them).
struct Answer {
  std::vector<std::string> tokens;
  std::vector<double> logprobs;
  int prompt_tokens = 0;
  bool operator==(const Answer&) const = default;
};

Answer answer_of(const std::pair<int, json>& reply) {
  INFO(reply.second.dump());
  REQUIRE(reply.first == 200);
  Answer a;
  for (const json& t : reply.second["choices"][0]["logprobs"]["content"]) {
    std::string bytes;
    for (int b : t["bytes"]) bytes += char(b);
    a.tokens.push_back(bytes);
    a.logprobs.push_back(t["logprob"].get<double>());
  }
  a.prompt_tokens = reply.second["usage"]["prompt_tokens"].get<int>();
  return a;
}

// A PNG's signature and IHDR declaring w x h, then IEND: a few bytes claiming any size.
std::vector<std::uint8_t> png_declaring(std::uint32_t w, std::uint32_t h) {
  std::vector<std::uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  for (std::uint32_t v : {w, h}) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(std::uint8_t(v >> s));
  }
  b.insert(b.end(), {8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82});
  return b;
}

// A 16x16 baseline JPEG whose SOF0 then claims w x h (its data no longer fits: decoding fails late).
std::vector<std::uint8_t> jpeg_declaring(std::uint16_t w, std::uint16_t h) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = 16;
  c.image_height = 16;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<std::uint8_t> row(16 * 3, 90);
  while (c.next_scanline < c.image_height) {
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<std::uint8_t> b(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  for (std::size_t i = 2; i + 9 < b.size(); ++i) {
    if (b[i] == 0xff && b[i + 1] == 0xc0) {
      b[i + 5] = std::uint8_t(h >> 8), b[i + 6] = std::uint8_t(h);
      b[i + 7] = std::uint8_t(w >> 8), b[i + 8] = std::uint8_t(w);
      break;
    }
  }
  return b;
}

// This process's resident and peak resident KiB (/proc/self/status); the peak can be reset to the
// current size (clear_refs 5), false when the kernel does not allow it.
std::uint64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::strlen(key)));
  }
  return 0;
}
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

const std::filesystem::path& vision_container() {
  static test::ScratchDir dir;
  static std::filesystem::path model;
  if (model.empty()) {
    const auto out = dir.path() / "v.waste";
    auto synth = test::run_waste({"synth", "--preset", "tiny-k3", "--tokenizer", "--vision", "--vision-layers", "1",
                                  "--seed", "4", "--out", out.string()});
    INFO(synth.err);
    REQUIRE(synth.rc == 0);
    model = out;
  }
  return model;
}

}  // namespace

TEST_CASE("image_url parts: data: URLs in user messages, placed between the text parts", "[serve][request][image]") {
  const auto png = png_bytes(4, 3, 0);
  const json content = json::array({json{{"type", "text"}, {"text", "ab"}},
                                    json{{"type", "image_url"}, {"image_url", {{"url", data_url(png)}, {"detail", "low"}}}},
                                    json{{"type", "text"}, {"text", "cd"}},
                                    json{{"type", "image_url"}, {"image_url", data_url(png, "IMAGE/JPEG")}}});
  const std::string body = json{{"model", "m"},
                                {"messages", json::array({json{{"role", "system"}, {"content", "s"}},
                                                          json{{"role", "user"}, {"content", content}}})}}
                               .dump();
  auto r = parse_request(Endpoint::chat, body);
  INFO((r ? "" : r.error().message));
  REQUIRE(r);
  CHECK(r->messages[1].content == "abcd");
  REQUIRE(r->images.size() == 2);
  CHECK(r->images[0].message == 1);
  CHECK(r->images[0].offset == 2);
  CHECK(r->images[0].param == "messages[1].content[1].image_url.url");
  CHECK(r->images[0].bytes == png);
  CHECK(r->images[1].offset == 4);
  CHECK(r->images[1].param == "messages[1].content[3].image_url");  // the string form
  CHECK(r->images[1].bytes == png);  // the decoder, not the media type, decides what it is
}

TEST_CASE("image_url parts: remote URLs, local paths, bad base64 and other media types are refused by name",
          "[serve][request][image]") {
  const std::string p = "messages[0].content[1].image_url.url";
  const std::string only = "only data: URLs are accepted (data:image/png;base64,... or data:image/jpeg;base64,...)";
  ApiError e = chat_error(image_part_body("http://example.com/cat.png"));
  CHECK(e.param == p);
  CHECK(e.message == "'" + p + "' is a remote URL; " + only + ": this server fetches nothing");
  e = chat_error(image_part_body("HTTPS://example.com/cat.png"));
  CHECK(e.message == "'" + p + "' is a remote URL; " + only + ": this server fetches nothing");
  e = chat_error(image_part_body("/etc/passwd"));
  CHECK(e.message == "'" + p + "' is a local path; " + only + ": this server reads no file a request names");
  e = chat_error(image_part_body("file:///etc/passwd"));
  CHECK(e.message == "'" + p + "' is a local path; " + only + ": this server reads no file a request names");
  e = chat_error(image_part_body("cat.png"));
  CHECK(e.message == "'" + p + "' is not a data: URL; " + only);
  e = chat_error(image_part_body("data:image/png;base64,iVBO*w0K"));
  CHECK(e.message == "'" + p + "' is not valid base64 (character 4 of the data)");
  e = chat_error(image_part_body("data:image/png;base64,iVBORw0KG"));
  CHECK(e.message == "'" + p + "' is not valid base64 (its length)");
  e = chat_error(image_part_body("data:image/png;base64,"));
  CHECK(e.message == "'" + p + "' holds no image data");
  e = chat_error(image_part_body("data:image/gif;base64,R0lGODlh"));
  CHECK(e.message == "'" + p + "' has media type \"image/gif\"; only image/png and image/jpeg are accepted");
  e = chat_error(image_part_body("data:image/png,rawbytes"));
  CHECK(e.message == "'" + p + "' must hold base64 data (data:image/png;base64,...)");
  e = chat_error(image_part_body("data:image/png;base64"));
  CHECK(e.message == "'" + p + "' is a data: URL without the ',' before its data");

  // Shape errors, images outside user messages, too many images.
  e = chat_error(chat_body(json::array({json{{"type", "image_url"}}})));
  CHECK(e.param == "messages[0].content[0].image_url");
  CHECK(e.message == "'messages[0].content[0].image_url' is required");
  e = chat_error(chat_body(json::array({json{{"type", "image_url"}, {"image_url", {{"url", 5}}}}})));
  CHECK(e.message == "'messages[0].content[0].image_url.url' must be a string (a data: URL)");
  e = chat_error(chat_body(json::array({json{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}, {"detail", 1}}}}})));
  CHECK(e.message == "'messages[0].content[0].image_url.detail' must be a string");
  for (const char* role : {"system", "assistant"}) {
    e = chat_error(chat_body(json::array({json{{"type", "image_url"}, {"image_url", "data:image/png;base64,AAAA"}}}), role));
    CHECK(e.param == "messages[0].content[0].type");
    CHECK(e.message == "'messages[0].content[0].type' \"image_url\" is only accepted in user messages");
  }
  json many = json::array();
  for (std::size_t i = 0; i <= kMaxImages; ++i) many.push_back(json{{"type", "image_url"}, {"image_url", "data:image/png;base64,AAAA"}});
  e = chat_error(chat_body(many));
  CHECK(e.param == "messages[0].content[16]");
  CHECK(e.message == "'messages[0].content[16]': at most 16 image_url parts per request");

  // The decoder's byte limit, checked before decoding (a smaller limit than the default here).
  auto big = decode_data_url("data:image/png;base64," + std::string(16, 'A'), "x", 11);
  REQUIRE_FALSE(big);
  CHECK(big.error().message == "'x' holds 12 bytes of image data; the limit is 11 bytes");
  auto fits = decode_data_url("data:image/png;base64," + std::string(16, 'A'), "x", 12);
  REQUIRE(fits);
  CHECK(fits->size() == 12);
  auto unpadded = decode_data_url("data:image/jpeg;base64,/9j/4A", "x", 64);
  REQUIRE(unpadded);
  CHECK(*unpadded == std::vector<std::uint8_t>{0xff, 0xd8, 0xff, 0xe0});
}

TEST_CASE("image blocks go at their parts' places among the text parts, the text around them plain",
          "[serve][image]") {
  const auto& model = vision_container();
  auto tokenizer = Tokenizer::load(model);
  REQUIRE(tokenizer);
  auto format = ChatFormat::load(kFormat);
  REQUIRE(format);
  EngineOptions o;
  o.model = model;
  auto engine = Engine::open(o);
  REQUIRE(engine);
  auto encoder = vision::load_media_encoder(model, *tokenizer, (*engine)->config().hidden);
  REQUIRE(encoder);
  const ServeVision vision{&encoder->tower, encoder->tokens};
  const json content = json::array({json{{"type", "text"}, {"text", "ab <|media_pad|>"}},
                                    json{{"type", "image_url"}, {"image_url", data_url(png_bytes(84, 56, 0))}},
                                    json{{"type", "text"}, {"text", "cd"}},
                                    json{{"type", "image_url"}, {"image_url", data_url(png_bytes(28, 56, 3))}}});
  auto r = parse_request(Endpoint::chat, json{{"model", "m"},
                                              {"messages", json::array({json{{"role", "system"}, {"content", "s"}},
                                                                        json{{"role", "user"}, {"content", content}}})}}
                                             .dump());
  REQUIRE(r);
  GenerationJob job;
  REQUIRE(build_media_prompt(*r, *tokenizer, *format, vision, job));

  // By hand: the turns' markup, the texts in plain mode (the literal "<|media_pad|>" stays text),
  // each block from the one builder.
  std::vector<int> want;
  tokenizer->encode_markup(format->system.prefix, want);
  tokenizer->encode("s", want);
  tokenizer->encode_markup(format->system.suffix, want);
  tokenizer->encode_markup(format->user.prefix, want);
  tokenizer->encode("ab <|media_pad|>", want);
  const std::size_t first = vision::append_media_block(*tokenizer, encoder->tokens, 84, 56, 6, want);
  tokenizer->encode("cd", want);
  const std::size_t second = vision::append_media_block(*tokenizer, encoder->tokens, 28, 56, 2, want);
  tokenizer->encode_markup(format->user.suffix, want);
  tokenizer->encode_markup(format->open_turn(), want);
  CHECK(job.prompt == want);
  REQUIRE(job.images.size() == 2);
  CHECK(job.images[0].first == first);
  CHECK(job.images[0].positions() == 6);
  CHECK(job.images[1].first == second);
  CHECK(job.images[1].positions() == 2);  // 2x4 patches
  CHECK(std::count(job.prompt.begin(), job.prompt.end(), encoder->tokens.pad) == 8);
}

TEST_CASE("a served image_url request gives the tokens of waste run --image on the same file and text",
          "[serve][image]") {
  const auto& model = vision_container();
  test::ScratchDir dir;
  const auto png = png_bytes(84, 56, 0);  // 6x4 patches: 6 media positions
  const auto file = dir.path() / "img.png";
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  }
  auto ran = test::run_waste({"run", model.string(), "what is it", "--image", file.string(), "--threads", "2",
                              "--ctx", "256", "-n", "12", "--temp", "0", "--chat-format", kFormat, "--json"});
  INFO(ran.err);
  REQUIRE(ran.rc == 0);
  const json doc = json::parse(ran.out);

  // 5 tokens per pass on the server: its 6 media positions are fed over several passes, beside
  // run's single chunk.
  Served served(model, true, 5);
  const Answer got = answer_of(served.chat(greedy(json::array({user_with_image(data_url(png), "what is it")}), 12)));
  std::vector<std::string> want;
  for (int id : doc["tokens"].get<std::vector<int>>()) want.push_back(served.tokenizer().decode_token(id));
  // run reports the stop token it fed; the server ends there without emitting it.
  if (doc["stop"] != "max_tokens") want.pop_back();
  CHECK_FALSE(want.empty());
  CHECK(got.tokens == want);
  CHECK(got.prompt_tokens == doc["stats"]["prompt_tokens"].get<int>());
}

TEST_CASE("an image request batched with a text-only one, and two images with the same text, each as alone",
          "[serve][image][scheduler]") {
  Served served(vision_container(), true);
  const json image_a = greedy(json::array({user_with_image(data_url(png_bytes(84, 56, 0)), "what is it")}), 12);
  const json image_b = greedy(json::array({user_with_image(data_url(png_bytes(84, 56, 40)), "what is it")}), 12);
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "word" + std::to_string(i) + " ";
  const json text_only = greedy(json::array({json{{"role", "user"}, {"content", long_text}}}), 12);

  const Answer a = answer_of(served.chat(image_a));
  const Answer b = answer_of(served.chat(image_b));
  const Answer t = answer_of(served.chat(text_only));
  // Same token ids at the pads, different rows: the answers differ (the logits at least).
  CHECK(a.prompt_tokens == b.prompt_tokens);
  CHECK(a.logprobs != b.logprobs);

  std::vector<json> bodies = {image_a, text_only, image_b, image_a};
  std::vector<std::pair<int, json>> replies(bodies.size());
  // At once, on 2 slots: the first two batch together, the others join as slots free up.
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    clients.emplace_back([&, i] { replies[i] = served.chat(bodies[i]); });
  }
  for (auto& c : clients) c.join();
  CHECK(answer_of(replies[0]) == a);
  CHECK(answer_of(replies[1]) == t);
  CHECK(answer_of(replies[2]) == b);
  CHECK(answer_of(replies[3]) == a);
}

TEST_CASE("the prefix cache keys media positions by the image: another image with the same pads is fed again",
          "[serve][image][prefix]") {
  Served cached(vision_container(), true, 16, std::uint64_t(64) << 20);
  Served plain(vision_container(), true, 16, 0);
  const std::string a = data_url(png_bytes(84, 56, 0)), b = data_url(png_bytes(84, 56, 40));
  const auto reused = [](const std::pair<int, json>& reply) {
    return reply.second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  };
  // Turn 1 with image A, then turn 2 over it: the second restores the first's state past the image.
  const json turn1 = greedy(json::array({user_with_image(a, "what is it")}), 8);
  const auto first = cached.chat(turn1);
  CHECK(answer_of(first) == answer_of(plain.chat(turn1)));
  CHECK(reused(first) == 0);
  const std::string said = first.second["choices"][0]["message"]["content"].get<std::string>();
  const auto turn2 = [&](const std::string& url) {
    return greedy(json::array({user_with_image(url, "what is it"), json{{"role", "assistant"}, {"content", said}},
                               json{{"role", "user"}, {"content", "and the colour?"}}}),
                  8);
  };
  const auto second = cached.chat(turn2(a));
  CHECK(answer_of(second) == answer_of(plain.chat(turn2(a))));
  CHECK(reused(second) >= answer_of(first).prompt_tokens);
  // Image B at the same place: the same pad ids, but its positions' keys differ from A's, so
  // nothing past the text before them is reused, and the answer is B's own.
  const auto other = cached.chat(turn2(b));
  CHECK(answer_of(other) == answer_of(plain.chat(turn2(b))));
  CHECK(answer_of(other) != answer_of(second));
  CHECK(reused(other) < answer_of(first).prompt_tokens);
}

TEST_CASE("served image_url errors: the part named, the decoder's reason, and a model without a tower",
          "[serve][image]") {
  const std::string p = "messages[0].content[0].image_url.url";
  {
    Served served(vision_container(), true);
    auto reply = served.chat(greedy(json::array({user_with_image("https://example.com/x.png", "hi")})));
    CHECK(reply.first == 400);
    CHECK(reply.second["error"]["param"] == p);
    CHECK(reply.second["error"]["message"] ==
          "'" + p + "' is a remote URL; only data: URLs are accepted (data:image/png;base64,... or "
                    "data:image/jpeg;base64,...): this server fetches nothing");
    reply = served.chat(greedy(json::array({user_with_image("/tmp/x.png", "hi")})));
    CHECK(reply.first == 400);
    CHECK(reply.second["error"]["message"] ==
          "'" + p + "' is a local path; only data: URLs are accepted (data:image/png;base64,... or "
                    "data:image/jpeg;base64,...): this server reads no file a request names");
    reply = served.chat(greedy(json::array({user_with_image("data:image/png;base64,iVBORw0KGgo!", "hi")})));
    CHECK(reply.first == 400);
    CHECK(reply.second["error"]["message"] == "'" + p + "' is not valid base64 (character 11 of the data)");
    const std::string text = "not an image at all";
    reply = served.chat(greedy(json::array({user_with_image(
        data_url(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size())), "hi")})));
    CHECK(reply.first == 400);
    CHECK(reply.second["error"]["param"] == p);
    CHECK(reply.second["error"]["message"] == "'" + p + "': not a PNG or JPEG image");
    auto cut = png_bytes(84, 56, 0);
    cut.resize(cut.size() / 2);
    reply = served.chat(greedy(json::array({user_with_image(data_url(cut), "hi")})));
    CHECK(reply.first == 400);
    CHECK(reply.second["error"]["message"] == "'" + p + "': cannot decode PNG (pixels): read beyond end of data");
    // A good request still works after the refusals.
    CHECK(served.chat(greedy(json::array({user_with_image(data_url(png_bytes(28, 28, 1)), "hi")}), 2)).first == 200);
  }
  Served plain(test::tokenizer_container(), false);
  auto reply = plain.chat(greedy(json::array({user_with_image(data_url(png_bytes(28, 28, 1)), "hi")})));
  CHECK(reply.first == 400);
  CHECK(reply.second["error"]["param"] == p);
  CHECK(reply.second["error"]["message"] == "'" + p + "': this model has no vision tower (no vision.json in the "
                                                      "container), so image_url parts are not supported");
}

TEST_CASE("image sizes are checked from their headers before any decode: per image, per request, server-wide",
          "[serve][image][limits]") {
  const auto& model = vision_container();
  auto tokenizer = Tokenizer::load(model);
  REQUIRE(tokenizer);
  auto format = ChatFormat::load(kFormat);
  REQUIRE(format);
  EngineOptions o;
  o.model = model;
  auto engine = Engine::open(o);
  REQUIRE(engine);
  auto encoder = vision::load_media_encoder(model, *tokenizer, (*engine)->config().hidden);
  REQUIRE(encoder);
  const ServeVision vision{&encoder->tower, encoder->tokens};
  auto request = [&](const std::vector<std::vector<std::uint8_t>>& images) {
    json content = json::array({json{{"type", "text"}, {"text", "look"}}});
    for (const auto& bytes : images) content.push_back(json{{"type", "image_url"}, {"image_url", data_url(bytes)}});
    auto r = parse_request(Endpoint::chat, chat_body(content));
    REQUIRE(r);
    return std::move(*r);
  };
  GenerationJob job;
  PixelBudget budget(64ull << 20);

  // 8000 x 8000 declared in a few bytes, PNG and JPEG: refused from the header, before the
  // decoder would size a 183 MiB pixel buffer (the peak RSS shows no such allocation).
  const bool peak_resettable = reset_peak_rss();
  const std::uint64_t rss_before = status_kib("VmRSS:");
  for (const auto& bytes : {png_declaring(8000, 8000), jpeg_declaring(8000, 8000), png_declaring(20000, 20000),
                            jpeg_declaring(20000, 20000)}) {
    auto refused = build_media_prompt(request({bytes}), *tokenizer, *format, vision, job, RequestLimits{}, budget);
    CHECK_FALSE(refused);
    if (refused) continue;  // (the peak check below still runs)
    CHECK(refused.error().status == 400);
    CHECK(refused.error().param == "messages[0].content[1].image_url");
    CHECK(refused.error().message.find(" pixels exceed the limit of 16777216 per image (--max-image-mpx 16)") !=
          std::string::npos);
  }
  if (peak_resettable) {
    const std::uint64_t peak = status_kib("VmHWM:");
    CHECK(peak < rss_before + 16 * 1024);
  } else {
    WARN("/proc/self/clear_refs not writable: the peak RSS check is skipped");
  }
  CHECK(budget.in_use() == 0);
  auto named = build_media_prompt(request({png_declaring(8000, 8000)}), *tokenizer, *format, vision, job,
                                  RequestLimits{}, budget);
  REQUIRE_FALSE(named);
  CHECK(named.error().message == "'messages[0].content[1].image_url': 8000x8000 pixels exceed the limit of 16777216 "
                                 "per image (--max-image-mpx 16)");

  // Per request: nine 4 Mpx images (declared) pass 32 Mpx at the ninth.
  std::vector<std::vector<std::uint8_t>> nine(9, png_declaring(2048, 2048));
  auto total = build_media_prompt(request(nine), *tokenizer, *format, vision, job, RequestLimits{}, budget);
  REQUIRE_FALSE(total);
  CHECK(total.error().status == 400);
  CHECK(total.error().param == "messages[0].content[9].image_url");
  CHECK(total.error().message == "'messages[0].content[9].image_url': the request's images up to this one hold "
                                 "37748736 pixels, over the limit of 33554432 per request (--max-request-mpx 32)");

  // Server-wide: what does not fit beside the pixels being decoded gets 429; once they are
  // released the same request goes through.
  PixelBudget small(1ull << 20);
  const auto real = request({png_bytes(28, 28, 1)});
  {
    auto held = small.try_lease((1ull << 20) - 100);
    REQUIRE(held);
    auto busy = build_media_prompt(real, *tokenizer, *format, vision, job, RequestLimits{}, small);
    REQUIRE_FALSE(busy);
    CHECK(busy.error().status == 429);
    CHECK(busy.error().type == "rate_limit_error");
    CHECK(busy.error().param == "messages[0].content[1].image_url");
    CHECK(busy.error().message == "'messages[0].content[1].image_url': the server is decoding 1048476 pixels of "
                                  "images; this request's 784 would pass its limit of 1048576 (--max-decode-mpx 1); "
                                  "retry later");
  }
  CHECK(small.in_use() == 0);
  CHECK(build_media_prompt(real, *tokenizer, *format, vision, job, RequestLimits{}, small));
  CHECK(small.in_use() == 0);  // the lease ends with the decoding
}

}  // namespace waste::serve
