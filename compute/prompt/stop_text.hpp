// Text out of a token stream, as a front end prints or sends it: whole UTF-8 characters only,
// ending at a stop text (a chat's assistant suffix, a request's stop strings) that is never shown.
// Used by `waste run`, `waste chat` and `waste serve`'s scheduler.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace waste {

// Incremental detokenizer for streaming: bytes of each token are buffered until they form
// complete UTF-8 characters, so a character split over tokens is never printed in halves.
class Utf8Stream {
 public:
  // Appends the token's bytes; returns what can be printed now.
  std::string push(std::string_view bytes);
  // What is left (an incomplete tail, printed as is at the end).
  std::string flush();

 private:
  std::string pending_;
};

// Streaming output that ends at a stop text (a chat's assistant suffix, --stop): text that
// could be the start of the stop text is held back until it is known not to be; once the stop
// text appears, the text before it is released and everything after is dropped. Complete UTF-8
// characters only, like Utf8Stream.
class StopTextStream {
 public:
  explicit StopTextStream(std::vector<std::string> stops = {});
  std::string push(std::string_view bytes);
  std::string finish();  // the held tail when no stop text appeared
  [[nodiscard]] bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  Utf8Stream utf8_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace waste
