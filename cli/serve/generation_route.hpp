// POST /v1/chat/completions and /v1/completions once admitted: parse the body, build the
// GenerationJob (chat template, tools, constraint, images), submit it on its reserved place, and
// answer with a reply the transport polls: streamed (SSE, `: ping` after 2 s of silence) or
// deferred (the whole JSON at the end). A client that leaves cancels its sequence. Runs on a
// worker thread (parsing, grammar compiling and image decoding can take a while), never on an
// I/O thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "cli/serve/chat_media.hpp"
#include "cli/serve/http/message.hpp"
#include "cli/serve/openai_request.hpp"
#include "compute/prompt/output_constraint.hpp"
#include "cli/serve/scheduler.hpp"
#include "compute/prompt/chat_format.hpp"
#include "compute/tokenizer/tokenizer.hpp"

namespace waste::serve {

// What a ready server generates with; every pointer outlives the server's stop().
struct ServeModel {
  Scheduler* scheduler = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatFormat* chat_format = nullptr;  // null: chat requests get 400 (no chat.json)
  // The grammar engine's view of the vocabulary (null: constrained requests get 400).
  std::shared_ptr<const grammar::TokenIndex> token_index;
  ServeVision vision;  // tower null: image_url parts get 400
  // Kept by each reply until it is sent: what the reply still reads after its request ended (the
  // chat format's tool markup), so a model unloaded meanwhile does not take it away. Null: the
  // pointers above outlive every reply (a model that is never unloaded).
  std::shared_ptr<const void> hold = nullptr;
};

// The reply to one admitted generation request (`ticket`: its place in the scheduler, given
// back when the request is refused).
http::Reply generation_reply(Endpoint endpoint, std::string_view body, const ServeModel& model,
                             const std::string& model_id, Admission ticket);
// The same for a request parsed already, whose `model` names `model_id` (several models: the
// server parsed it to find its model).
http::Reply parsed_generation_reply(Endpoint endpoint, const ParsedRequest& parsed, const ServeModel& model,
                                    const std::string& model_id, Admission ticket);

}  // namespace waste::serve
