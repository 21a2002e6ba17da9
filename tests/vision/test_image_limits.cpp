// What a hostile image may cost before it is refused: its declared size is read from the header
// without decoding (read_image_header), and a progressive JPEG's scans are counted (each one is a
// pass over the whole coefficient buffer, for a few bytes of file).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <jpeglib.h>
#include <png.h>

#include "compute/vision/image_decode.hpp"
#include "compute/vision/image_header.hpp"

using namespace waste;
using namespace waste::vision;

namespace {

using Bytes = std::vector<std::uint8_t>;

// A w x h RGB JPEG (grey pixels); `per_coefficient`: progressive, one scan per AC coefficient
// and component (1 + 3 x 63 = 190 scans, a valid script).
Bytes jpeg(int w, int h, bool per_coefficient) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  std::vector<jpeg_scan_info> script;
  if (per_coefficient) {
    jpeg_scan_info dc{};
    dc.comps_in_scan = 3;
    for (int k = 0; k < 3; ++k) dc.component_index[k] = k;
    script.push_back(dc);
    for (int comp = 0; comp < 3; ++comp) {
      for (int k = 1; k < 64; ++k) {
        jpeg_scan_info ac{};
        ac.comps_in_scan = 1;
        ac.component_index[0] = comp;
        ac.Ss = k;
        ac.Se = k;
        script.push_back(ac);
      }
    }
    c.scan_info = script.data();
    c.num_scans = int(script.size());
  }
  jpeg_start_compress(&c, TRUE);
  std::vector<std::uint8_t> row(std::size_t(w) * 3, 128);
  while (c.next_scanline < c.image_height) {
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

// A PNG's signature and IHDR declaring w x h (CRC not checked by the header reader), then IEND.
Bytes png_declaring(std::uint32_t w, std::uint32_t h) {
  Bytes b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  for (std::uint32_t v : {w, h}) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(std::uint8_t(v >> s));
  }
  b.insert(b.end(), {8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82});
  return b;
}

// The JPEG's SOF0 width and height replaced (the data after it then no longer fits).
Bytes with_declared_size(Bytes b, std::uint16_t w, std::uint16_t h) {
  for (std::size_t i = 2; i + 9 < b.size(); ++i) {
    if (b[i] == 0xff && b[i + 1] == 0xc0) {
      b[i + 5] = std::uint8_t(h >> 8), b[i + 6] = std::uint8_t(h);
      b[i + 7] = std::uint8_t(w >> 8), b[i + 8] = std::uint8_t(w);
      return b;
    }
  }
  FAIL("no SOF0");
  return b;
}

}  // namespace

TEST_CASE("read_image_header: the declared size of a PNG and a JPEG, nothing decoded", "[vision][decode]") {
  auto png = read_image_header(png_declaring(20000, 20000), "p");
  REQUIRE(png);
  CHECK(png->width == 20000);
  CHECK(png->height == 20000);
  CHECK(png->pixels() == 400000000ull);
  auto small = read_image_header(jpeg(24, 16, false), "j");
  REQUIRE(small);
  CHECK(small->width == 24);
  CHECK(small->height == 16);
  auto big = read_image_header(with_declared_size(jpeg(24, 16, false), 20000, 20000), "j");
  REQUIRE(big);
  CHECK(big->pixels() == 400000000ull);
  auto progressive = read_image_header(jpeg(40, 8, true), "j");  // SOF2
  REQUIRE(progressive);
  CHECK(progressive->width == 40);
  // Cut or malformed headers are errors naming the image, never a read past the end.
  CHECK(read_image_header(Bytes{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0}, "p").error().message ==
        "p: PNG without an IHDR header");
  const Bytes j = jpeg(24, 16, false);
  for (std::size_t n = 3; n < 200 && n < j.size(); ++n) {
    auto cut = read_image_header(std::span(j).first(n), "j");
    if (cut) continue;  // the frame header was already complete
    CHECK(cut.error().message == "j: JPEG without a frame header (SOFn)");
  }
  CHECK(read_image_header(Bytes{'G', 'I', 'F', '8'}, "g").error().message == "g: not a PNG or JPEG image");
}

TEST_CASE("a progressive JPEG with more scans than the limit is refused", "[vision][decode]") {
  const Bytes many = jpeg(16, 16, true);  // 190 scans
  auto refused = decode_image(many, "scans.jpg");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message == "scans.jpg: cannot decode JPEG: more than 100 scans (the scan limit)");
  DecodeLimits more;
  more.max_scans = 190;
  auto decoded = decode_image(many, "scans.jpg", more);
  REQUIRE(decoded);
  CHECK(decoded->width == 16);
  CHECK(decoded->pixels[0] == 128);
  // A baseline JPEG (one scan) is untouched by a limit of 1.
  DecodeLimits one;
  one.max_scans = 1;
  CHECK(decode_image(jpeg(16, 16, false), "one.jpg", one));
}
