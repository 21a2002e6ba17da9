// JPEG through libjpeg(-turbo)'s classic API. Its errors arrive through error_exit, which must
// not return: it longjmps back to decode_jpeg, so no object with a destructor may be created
// between the setjmp and the end of decoding (the output vector is declared before it).
// A truncated file is only a warning to libjpeg (it pads with grey); here it is an error.
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>

#include "compute/vision/codecs.hpp"
#include "compute/vision/exif_orientation.hpp"

namespace waste::vision::detail {
namespace {

struct ErrorMgr {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

// Called by libjpeg before it consumes each piece of input while it buffers a multi-scan file
// (jpeg_start_decompress), so a scan past the limit stops it before that scan is decoded.
struct ScanLimit {
  jpeg_progress_mgr pub;  // first: libjpeg sees a jpeg_progress_mgr*
  int max_scans;
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void on_progress(j_common_ptr cinfo) {
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  const auto* limit = reinterpret_cast<const ScanLimit*>(cinfo->progress);
  if (d->input_scan_number <= limit->max_scans) return;
  auto* e = reinterpret_cast<ErrorMgr*>(cinfo->err);
  std::snprintf(e->message, sizeof e->message, "more than %d scans (the scan limit)", limit->max_scans);
  std::longjmp(e->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error(cinfo);  // truncated data
}

int jpeg_exif_orientation(j_decompress_ptr cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      return exif_orientation(std::span<const std::uint8_t>(m->data + 6, m->data_length - 6));
    }
  }
  return 1;
}

}  // namespace

Result<RgbImage> decode_jpeg(std::span<const std::uint8_t> bytes, const std::string& name, const DecodeLimits& limits,
                             int& orientation) {
  RgbImage out;
  Status limit_status;
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  ScanLimit scans{};
  scans.pub.progress_monitor = on_progress;
  scans.max_scans = limits.max_scans;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  err.message[0] = '\0';
  if (setjmp(err.jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    return make_error(Errc::format, name + ": cannot decode JPEG: " + err.message);
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &scans.pub;
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&cinfo, TRUE);
  limit_status = check_pixels(cinfo.image_width, cinfo.image_height, name, limits);
  if (!limit_status) {
    jpeg_destroy_decompress(&cinfo);
    return std::unexpected(limit_status.error());
  }
  orientation = jpeg_exif_orientation(&cinfo);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out.width = int(cinfo.output_width);
  out.height = int(cinfo.output_height);
  out.pixels.resize(std::size_t(out.width) * std::size_t(out.height) * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.pixels.data() + std::size_t(cinfo.output_scanline) * std::size_t(out.width) * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

}  // namespace waste::vision::detail
