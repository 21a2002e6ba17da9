#include "cli/serve/json_body.hpp"

#include <vector>

namespace waste::serve {
namespace {

using nlohmann::json;

// nlohmann's DOM builder behind a SAX front that follows the path and stops one level too deep.
class BoundedSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  BoundedSax(json& out, int max_depth) : dom_(out, true), max_depth_(max_depth) {}

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return value() && dom_.number_float(v, s); }
  bool string(string_t& v) { return value() && dom_.string(v); }
  bool binary(binary_t& v) { return value() && dom_.binary(v); }
  bool start_object(std::size_t n) { return open(false) && dom_.start_object(n); }
  bool key(string_t& k) {
    frames_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return open(true) && dom_.start_array(n); }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& ex) {
    return dom_.parse_error(position, token, ex);  // throws (allow_exceptions)
  }

  [[nodiscard]] bool too_deep() const { return too_deep_; }
  // Where the refused level opens: a schema root when inside one, else the first three steps.
  [[nodiscard]] std::string param() const {
    std::string path;
    for (std::size_t i = 0; i < frames_.size() && i < 3; ++i) {
      const Frame& f = frames_[i];  // the step from frame i to what opens inside it
      if (f.array) {
        path += "[" + std::to_string(f.index - 1) + "]";
      } else {
        path += (path.empty() ? "" : ".") + f.key;
      }
      if (path == "response_format.json_schema.schema") return path;
    }
    if (path.starts_with("tools[") && frames_.size() > 3 && !frames_[3].array) {
      path += "." + frames_[3].key;  // tools[i].function.parameters
    }
    return path;
  }

 private:
  struct Frame {
    bool array = false;
    std::size_t index = 0;  // array: elements seen (the current one is index - 1)
    std::string key;        // object: the current key
  };

  bool value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return true;
  }
  bool open(bool array) {
    value();
    if (int(frames_.size()) >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    frames_.push_back({array, 0, {}});
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int max_depth_;
  std::vector<Frame> frames_;
  bool too_deep_ = false;
};

}  // namespace

std::expected<nlohmann::json, ApiError> parse_json_body(std::string_view text, int max_depth) {
  json body;
  BoundedSax sax(body, max_depth);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {  // parse_error; out_of_range for a number beyond double (1e999)
    return std::unexpected(ApiError{400, std::string("request body is not valid JSON: ") + e.what(),
                                    "invalid_request_error", "", ""});
  }
  if (sax.too_deep()) {
    std::string param = sax.param();
    std::string message = (param.empty() ? std::string("request body") : param) + ": nesting deeper than " +
                          std::to_string(max_depth) + " (--max-json-depth)";
    return std::unexpected(bad_param(std::move(param), std::move(message)));
  }
  return body;
}

}  // namespace waste::serve
