// PNG / JPEG decoding: pixels against pixels, EXIF orientation, limits, and the exact errors
// for bad and truncated files. The images are encoded here with libpng / libjpeg (a few KB).
#include <catch2/catch.hpp>

#include <png.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <jpeglib.h>

#include "compute/vision/exif_orientation.hpp"
#include "compute/vision/image_decode.hpp"
#include "../shared/temp_dir.hpp"

using namespace waste;
using namespace waste::vision;

namespace {

using Bytes = std::vector<std::uint8_t>;

// 16x8: left half red, right half blue; pixel (x, y) of the test pattern otherwise.
RgbImage halves(int w = 16, int h = 8) {
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(std::size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &img.pixels[(std::size_t(y) * w + x) * 3];
      p[0] = x < w / 2 ? 250 : 5;
      p[1] = 5;
      p[2] = x < w / 2 ? 5 : 250;
    }
  return img;
}

Bytes encode_png(const RgbImage& img, png_uint_32 format = PNG_FORMAT_RGB, const std::uint8_t* src = nullptr) {
  png_image p;
  std::memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  p.width = png_uint_32(img.width);
  p.height = png_uint_32(img.height);
  p.format = format;
  png_alloc_size_t size = 0;
  const void* data = src != nullptr ? src : img.pixels.data();
  REQUIRE(png_image_write_to_memory(&p, nullptr, &size, 0, data, 0, nullptr));
  Bytes out(size);
  REQUIRE(png_image_write_to_memory(&p, out.data(), &size, 0, data, 0, nullptr));
  out.resize(size);
  return out;
}

// A TIFF block with IFD0 holding only Orientation = `o` (little-endian).
Bytes exif_tiff(int o) {
  return {'I', 'I', 42, 0, 8, 0, 0, 0,            // header, IFD0 at 8
          1, 0,                                    // one entry
          0x12, 0x01, 3, 0, 1, 0, 0, 0, std::uint8_t(o), 0, 0, 0,  // 0x0112 SHORT x1
          0, 0, 0, 0};                             // no next IFD
}

// Insert an eXIf chunk right after IHDR (8 + 25 bytes).
Bytes with_png_exif(Bytes png, int o) {
  const Bytes tiff = exif_tiff(o);
  Bytes chunk = {0, 0, 0, std::uint8_t(tiff.size()), 'e', 'X', 'I', 'f'};
  chunk.insert(chunk.end(), tiff.begin(), tiff.end());
  const uLong crc = crc32(0, chunk.data() + 4, uInt(chunk.size() - 4));
  for (int s = 24; s >= 0; s -= 8) chunk.push_back(std::uint8_t(crc >> s));
  png.insert(png.begin() + 33, chunk.begin(), chunk.end());
  return png;
}

Bytes encode_jpeg(const RgbImage& img, int orientation = 0) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(img.width);
  c.image_height = JDIMENSION(img.height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  if (orientation != 0) {
    Bytes app1 = {'E', 'x', 'i', 'f', 0, 0};
    const Bytes tiff = exif_tiff(orientation);
    app1.insert(app1.end(), tiff.begin(), tiff.end());
    jpeg_write_marker(&c, JPEG_APP0 + 1, app1.data(), unsigned(app1.size()));
  }
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<std::uint8_t*>(&img.pixels[std::size_t(c.next_scanline) * img.width * 3]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

bool near(const RgbImage& img, int x, int y, int r, int g, int b, int tol) {
  const std::uint8_t* p = &img.pixels[(std::size_t(y) * img.width + x) * 3];
  return std::abs(p[0] - r) <= tol && std::abs(p[1] - g) <= tol && std::abs(p[2] - b) <= tol;
}

}  // namespace

TEST_CASE("a PNG decodes to its exact RGB bytes, alpha is composited onto white", "[vision][decode]") {
  const RgbImage src = halves();
  auto img = decode_image(encode_png(src), "a.png");
  REQUIRE(img.has_value());
  CHECK(img->width == 16);
  CHECK(img->height == 8);
  CHECK(img->pixels == src.pixels);
  // RGBA: a transparent pixel becomes white, an opaque one keeps its colour.
  std::vector<std::uint8_t> rgba = {10, 20, 30, 255, 10, 20, 30, 0};
  RgbImage two;
  two.width = 2;
  two.height = 1;
  auto alpha = decode_image(encode_png(two, PNG_FORMAT_RGBA, rgba.data()), "rgba.png");
  REQUIRE(alpha.has_value());
  CHECK(alpha->pixels == std::vector<std::uint8_t>{10, 20, 30, 255, 255, 255});
}

TEST_CASE("a JPEG decodes close to its source colours", "[vision][decode]") {
  auto img = decode_image(encode_jpeg(halves()), "a.jpg");
  REQUIRE(img.has_value());
  CHECK(img->width == 16);
  CHECK(img->height == 8);
  CHECK(near(*img, 2, 4, 250, 5, 5, 12));
  CHECK(near(*img, 13, 4, 5, 5, 250, 12));
}

TEST_CASE("EXIF orientation 6 in a JPEG and 3 in a PNG turn the pixels", "[vision][decode][exif]") {
  // Stored 16x8 red|blue, orientation 6 (rotate 90 clockwise to view): 8x16, red on top.
  auto jpg = decode_image(encode_jpeg(halves(), 6), "rot6.jpg");
  REQUIRE(jpg.has_value());
  CHECK(jpg->width == 8);
  CHECK(jpg->height == 16);
  CHECK(near(*jpg, 4, 2, 250, 5, 5, 12));
  CHECK(near(*jpg, 4, 13, 5, 5, 250, 12));
  // Orientation 3 (rotated 180): blue on the left now, exact for PNG.
  auto png = decode_image(with_png_exif(encode_png(halves()), 3), "rot3.png");
  REQUIRE(png.has_value());
  CHECK(png->width == 16);
  CHECK(near(*png, 0, 0, 5, 5, 250, 0));
  CHECK(near(*png, 15, 7, 250, 5, 5, 0));
}

TEST_CASE("the eight orientations map a 3x2 image as EXIF defines them", "[vision][exif]") {
  // Stored pixels numbered 0..5 row-major (red channel): 0 1 2 / 3 4 5.
  RgbImage s;
  s.width = 3;
  s.height = 2;
  for (int i = 0; i < 6; ++i) s.pixels.insert(s.pixels.end(), {std::uint8_t(i), 0, 0});
  auto reds = [](const RgbImage& d) {
    std::vector<int> r;
    for (std::size_t i = 0; i < d.pixels.size(); i += 3) r.push_back(d.pixels[i]);
    return r;
  };
  CHECK(reds(apply_orientation(s, 1)) == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(reds(apply_orientation(s, 2)) == std::vector<int>{2, 1, 0, 5, 4, 3});
  CHECK(reds(apply_orientation(s, 3)) == std::vector<int>{5, 4, 3, 2, 1, 0});
  CHECK(reds(apply_orientation(s, 4)) == std::vector<int>{3, 4, 5, 0, 1, 2});
  CHECK(reds(apply_orientation(s, 5)) == std::vector<int>{0, 3, 1, 4, 2, 5});
  CHECK(reds(apply_orientation(s, 6)) == std::vector<int>{3, 0, 4, 1, 5, 2});
  CHECK(reds(apply_orientation(s, 7)) == std::vector<int>{5, 2, 4, 1, 3, 0});
  CHECK(reds(apply_orientation(s, 8)) == std::vector<int>{2, 5, 1, 4, 0, 3});
  CHECK(apply_orientation(s, 6).width == 2);
  // Big-endian TIFF and a missing tag.
  const Bytes mm = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0};
  CHECK(exif_orientation(mm) == 8);
  CHECK(exif_orientation(Bytes{'I', 'I', 42, 0, 8, 0, 0, 0, 0, 0}) == 1);
}

TEST_CASE("bad, truncated and oversized images are errors naming the file", "[vision][decode]") {
  // Hazard: a file that is neither format must not reach a decoder.
  auto junk = decode_image(Bytes{'G', 'I', 'F', '8', '9', 'a', 0, 0, 0}, "x.gif");
  REQUIRE_FALSE(junk.has_value());
  CHECK(junk.error().message == "x.gif: not a PNG or JPEG image");
  // Hazard: libpng must not hand back a half-filled buffer for a cut-off file.
  Bytes png = encode_png(halves());
  png.resize(png.size() - 20);
  auto cut_png = decode_image(png, "cut.png");
  REQUIRE_FALSE(cut_png.has_value());
  CHECK(cut_png.error().message == "cut.png: cannot decode PNG (pixels): read beyond end of data");
  // Hazard: libjpeg only warns on a truncated file and pads with grey.
  Bytes jpg = encode_jpeg(halves(64, 64));
  jpg.resize(jpg.size() / 2);
  auto cut_jpg = decode_image(jpg, "cut.jpg");
  REQUIRE_FALSE(cut_jpg.has_value());
  CHECK(cut_jpg.error().message == "cut.jpg: cannot decode JPEG: Premature end of JPEG file");
  auto header_only = decode_image(Bytes{0xff, 0xd8, 0xff, 0xe0}, "hdr.jpg");
  REQUIRE_FALSE(header_only.has_value());
  CHECK(header_only.error().message == "hdr.jpg: cannot decode JPEG: Premature end of JPEG file");
  // Limits: bytes before decoding, pixels from the header.
  DecodeLimits small;
  small.max_bytes = 20;
  auto big = decode_image(encode_png(halves()), "big.png", small);
  REQUIRE_FALSE(big.has_value());
  CHECK(big.error().message.ends_with(" bytes exceed the image limit of 20 bytes"));
  DecodeLimits few;
  few.max_pixels = 100;
  auto many = decode_image(encode_jpeg(halves()), "many.jpg", few);
  REQUIRE_FALSE(many.has_value());
  CHECK(many.error().message == "many.jpg: 16x8 pixels exceed the image limit of 100 pixels");
}

TEST_CASE("decode_image_file reads a file and names it in errors", "[vision][decode]") {
  test::TempDir dir("decode");
  const auto path = dir.path() / "img.png";
  const Bytes png = encode_png(halves());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  auto img = decode_image_file(path);
  REQUIRE(img.has_value());
  CHECK(img->pixels == halves().pixels);
  auto missing = decode_image_file(dir.path() / "none.png");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find((dir.path() / "none.png").string()) != std::string::npos);
}
