/* waste.h -- the C API of WASTE (libwaste.so / libwaste.a), C11 and C++ compatible.
 *
 * A thin layer over the C++ engine (compute/api/engine.hpp): what `waste run`, `eval`,
 * `tokenize`, `detokenize` and `chat` do, callable from any language with a C FFI.
 *
 * Conventions (docs/design/c_api.md):
 * - Handles are opaque. A waste_model is used by one thread at a time (calls on one handle
 *   must not overlap); different handles may be used from different threads at once.
 *   waste_cancel() is the exception: any thread, any time.
 * - Every call returns a waste_status. On failure, waste_last_error() gives a message naming
 *   what failed (file, layer, field, ...), kept per thread until that thread's next failing call.
 * - Memory returned through an out-pointer (char **, int32_t **) belongs to the caller and is
 *   released with waste_free(). Strings passed in are only read during the call.
 * - Text is UTF-8, not necessarily NUL-terminated when a length is passed alongside.
 * - Option and result structs begin with `struct_size`: set it with the *_init() functions,
 *   so a newer library can tell an older caller's struct (ABI policy: SONAME libwaste.so.0).
 */
#ifndef WASTE_H
#define WASTE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define WASTE_API
#elif defined(__GNUC__)
#define WASTE_API __attribute__((visibility("default")))
#else
#define WASTE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define WASTE_API_VERSION 1

typedef enum waste_status {
  WASTE_OK = 0,
  WASTE_ERR_ARGUMENT = 1,    /* a bad argument: null pointer, out-of-range id, bad option */
  WASTE_ERR_IO = 2,          /* a file could not be opened, read or written */
  WASTE_ERR_FORMAT = 3,      /* not a valid container, session, chat.json, ... */
  WASTE_ERR_RAM_BUDGET = 4,  /* the budget is below the floor, or the daemon refused to admit us */
  WASTE_ERR_MEMORY = 5,      /* out of memory */
  WASTE_ERR_UNSUPPORTED = 6, /* valid input not implemented (e.g. a container without tokenizer) */
  WASTE_ERR_CANCELLED = 7,   /* reserved: generation stopped by request is WASTE_OK + stop reason */
  WASTE_ERR_IPC = 8,         /* waste-ioserver is gone, refused, or spoke another protocol */
  WASTE_ERR_INTERNAL = 9     /* a bug: please report the message */
} waste_status;

/* The message of this thread's last failure ("" when none). Valid until this thread's next
 * failing call; owned by the library (do not free). */
WASTE_API const char *waste_last_error(void);
/* "ok", "argument", "io", ... (static strings). */
WASTE_API const char *waste_status_name(waste_status status);
/* The library's version, "MAJOR.MINOR.PATCH" (static string). */
WASTE_API const char *waste_version(void);
/* Releases memory the library returned through an out-pointer. NULL is allowed. */
WASTE_API void waste_free(void *ptr);

/* ---- open / close ------------------------------------------------------------------------ */

typedef struct waste_model waste_model;

typedef enum waste_open_mode {
  /* Through waste-ioserver (the default, as `waste run`): attach to the daemon serving the
   * container, or start the container's shareable one, which exits `linger_ms` after its last
   * client. Any number of processes share it. */
  WASTE_OPEN_DAEMON = 0,
  /* The daemon's cache and readers inside this process (`waste run --in-process`). */
  WASTE_OPEN_IN_PROCESS = 1
} waste_open_mode;

typedef struct waste_open_options {
  uint32_t struct_size;   /* sizeof(waste_open_options), set by waste_open_options_init */
  int32_t mode;           /* waste_open_mode */
  int32_t ctx_tokens;     /* positions per sequence (default 4096) */
  int32_t threads;        /* compute threads, 0 = all hardware threads */
  const char *budget;     /* RAM budget "8G", "500M"; NULL = automatic (waste plan) */
  int32_t verify;         /* nonzero: CRC-check every expert record */
  int32_t direct_io;      /* nonzero (default): O_DIRECT reads where the filesystem allows */
  int32_t linger_ms;      /* daemon mode: linger of a daemon this open starts; -1 = default */
  int32_t allow_spawn;    /* daemon mode: nonzero (default) = start one when none serves */
  int64_t cache_records;  /* in-process mode: arena slots; -1 (default) = from the budget */
} waste_open_options;

/* Fills `options` with the defaults. */
WASTE_API void waste_open_options_init(waste_open_options *options);

/* Opens the container directory `path` (NAME.waste) with `options` (NULL = defaults) and
 * stores the handle in *out. The container's tokenizer and chat.json are loaded when present.
 * Thread-safe (each call makes its own handle). */
WASTE_API waste_status waste_open(const char *path, const waste_open_options *options, waste_model **out);
/* Releases the model (detaches from the daemon; a daemon it started lingers, then exits).
 * NULL is allowed. Must not overlap any other call on the handle. */
WASTE_API void waste_close(waste_model *model);

typedef struct waste_model_info {
  uint32_t struct_size;
  char arch[32];            /* "kimi_linear", "deepseek_v3", ... (NUL-terminated) */
  char expert_format[8];    /* "VQ3R", "VQ2R", "VQ4P" */
  char kernel_isa[16];      /* "avx512", "avx2", "generic", ... */
  int32_t n_layers, n_moe_layers, hidden, vocab, n_experts, top_k;
  int32_t ctx_tokens;       /* this handle's context length */
  int32_t threads;
  int32_t position;         /* tokens fed into the sequence so far */
  int32_t has_tokenizer;    /* nonzero: tokenize/detokenize/text calls work */
  int32_t has_chat_format;  /* nonzero: the container has a chat.json */
  int32_t bos, eos;         /* tokenizer's ids (-1 without tokenizer) */
  int32_t daemon_pid;       /* the waste-ioserver this handle reads through; 0 in-process */
  int32_t daemon_spawned;   /* nonzero: this open started that daemon */
  uint64_t record_bytes;    /* one expert record */
} waste_model_info;

WASTE_API void waste_model_info_init(waste_model_info *info);
WASTE_API waste_status waste_get_model_info(const waste_model *model, waste_model_info *info);

/* ---- tokens and text --------------------------------------------------------------------- */

#define WASTE_TOKENIZE_BOS 1u    /* prepend the tokenizer's BOS */
#define WASTE_TOKENIZE_MARKUP 2u /* template mode: special-token texts become their ids */

/* Tokenizes `len` bytes of `text` (plain mode: user text never forms a control token, unless
 * WASTE_TOKENIZE_MARKUP). *ids gets a waste_free()-able array of *n_ids ids (NULL when 0). */
WASTE_API waste_status waste_tokenize(const waste_model *model, const char *text, size_t len, uint32_t flags,
                                      int32_t **ids, size_t *n_ids);
/* The bytes of the ids, concatenated (specials give their text). *text gets a NUL-terminated,
 * waste_free()-able buffer of *len bytes (len may be NULL). An id outside the vocabulary is
 * WASTE_ERR_ARGUMENT naming its index. */
WASTE_API waste_status waste_detokenize(const waste_model *model, const int32_t *ids, size_t n_ids, char **text,
                                        size_t *len);

typedef enum waste_role { WASTE_ROLE_SYSTEM = 0, WASTE_ROLE_USER = 1, WASTE_ROLE_ASSISTANT = 2, WASTE_ROLE_TOOL = 3 } waste_role;

typedef struct waste_chat_message {
  int32_t role;         /* waste_role */
  const char *content;  /* NUL-terminated UTF-8 */
} waste_chat_message;

/* Applies a chat format to messages, as `waste run --system S "prompt"` and `waste chat` do:
 * `format_path` is a chat.json file, the name of an installed one ("chatml", "kimi-k3": a name
 * without '/' that is not a file here is looked up as share/waste/chat/NAME.json), or NULL for the
 * container's own. With `open_model_turn`
 * nonzero the text ends with what opens the model's turn. Outputs (either may be NULL):
 * *text (NUL-terminated, waste_free) and the prompt *ids (waste_free) -- use the ids to
 * generate: they tokenize the format's strings in markup mode and the content in plain mode,
 * which tokenizing *text would not. No format: WASTE_ERR_UNSUPPORTED. */
WASTE_API waste_status waste_chat_apply(const waste_model *model, const char *format_path,
                                        const waste_chat_message *messages, size_t n_messages,
                                        int32_t open_model_turn, char **text, size_t *text_len, int32_t **ids,
                                        size_t *n_ids);
/* The ids that end a chat turn in this format (eos, the assistant suffix's first special):
 * pass them as stop tokens. *ids is waste_free()-able. */
WASTE_API waste_status waste_chat_stop_tokens(const waste_model *model, const char *format_path, int32_t **ids,
                                              size_t *n_ids);

/* ---- generation -------------------------------------------------------------------------- */

/* Called once per generated token after it has been fed: the id and its bytes (`piece`, not
 * NUL-terminated; a multi-byte character may be split over two pieces; empty without a
 * tokenizer). Return 0 to continue, nonzero to stop (stop reason WASTE_STOP_CANCELLED).
 * Runs on the thread that called waste_generate. */
typedef int (*waste_token_callback)(void *user, int32_t token, const char *piece, size_t piece_len);

typedef enum waste_stop_reason {
  WASTE_STOP_MAX_TOKENS = 0,
  WASTE_STOP_STOP_TOKEN = 1,
  WASTE_STOP_EOS = 2,
  WASTE_STOP_CONTEXT_FULL = 3,
  WASTE_STOP_CANCELLED = 4
} waste_stop_reason;

typedef struct waste_generate_params {
  uint32_t struct_size;
  int32_t max_tokens;          /* default 256 */
  float temperature;           /* 0 (default) = greedy */
  float top_p;                 /* 1 = off */
  int32_t top_k;               /* 0 = off */
  uint64_t seed;               /* 0 = default */
  const int32_t *stop_tokens;  /* generation stops after feeding one of these */
  size_t n_stop_tokens;
  int32_t ignore_eos;          /* nonzero: do not stop at the model's eos */
} waste_generate_params;

WASTE_API void waste_generate_params_init(waste_generate_params *params);

typedef struct waste_generate_result {
  uint32_t struct_size;
  int32_t n_tokens;        /* generated tokens (each reported to the callback) */
  int32_t stop_reason;     /* waste_stop_reason */
  int32_t prompt_tokens;
  double prompt_seconds;
  double generate_seconds;
} waste_generate_result;

WASTE_API void waste_generate_result_init(waste_generate_result *result);

/* Feeds `prompt` after what the sequence already holds (waste_reset() starts over), then
 * samples, feeds and reports tokens until max_tokens, a stop/eos token (fed, reported, then
 * stop), a full context, the callback's nonzero return or waste_cancel(). An empty prompt
 * continues from the last token. `callback` and `result` may be NULL. */
WASTE_API waste_status waste_generate(waste_model *model, const int32_t *prompt, size_t n_prompt,
                                      const waste_generate_params *params, waste_token_callback callback,
                                      void *user, waste_generate_result *result);
/* Asks the generation running on `model` to stop after its current token; a cancel with no
 * generation running stops the next one after its first token. Thread-safe and async-signal-
 * safe (one atomic store). */
WASTE_API void waste_cancel(waste_model *model);

/* Empties the sequence (position 0). */
WASTE_API waste_status waste_reset(waste_model *model);

typedef struct waste_eval_result {
  uint32_t struct_size;
  int32_t n_tokens;   /* ids given */
  int32_t n_scored;   /* n_tokens - 1 */
  double mean_nll;    /* mean -log p(token | before), natural log */
  double perplexity;  /* exp(mean_nll) */
} waste_eval_result;

WASTE_API void waste_eval_result_init(waste_eval_result *result);
/* `waste eval --ids-file`: resets the sequence, then scores every id after the first by the
 * log-softmax (in double) of the logits before it. `logprobs` is NULL or has room for
 * n_ids - 1 values (log p of ids[1..]). Needs at least 2 ids, at most ctx_tokens. */
WASTE_API waste_status waste_eval(waste_model *model, const int32_t *ids, size_t n_ids, double *logprobs,
                                  waste_eval_result *result);

/* ---- constrained output and tools (what `waste run --grammar/--json-schema` and `waste serve`'s
 * tools do; compute/prompt) ---------------------------------------------------------------- */

typedef struct waste_constraint {
  uint32_t struct_size;     /* sizeof(waste_constraint), set by waste_constraint_init */
  const char *grammar;      /* NUL-terminated EBNF (GBNF-like) text, as `waste run --grammar FILE` reads */
  const char *json_schema;  /* NUL-terminated JSON Schema, as `waste run --json-schema FILE` reads */
} waste_constraint;       /* exactly one of grammar and json_schema is set */

WASTE_API void waste_constraint_init(waste_constraint *constraint);

/* waste_generate under a grammar, as `waste run --grammar/--json-schema`: before each token the
 * tokens the grammar cannot continue with are masked; the run ends when the match is finished,
 * or at an end token (eos, params.stop_tokens) once the match is complete -- that end token is
 * neither fed nor reported to the callback (it counts in result->n_tokens). Needs the tokenizer.
 * A grammar or schema that does not compile is WASTE_ERR_FORMAT (or _UNSUPPORTED for a schema
 * keyword not implemented) with a message beginning "constraint.grammar: " or
 * "constraint.json_schema: ". `complete` (may be NULL) gets nonzero when the output is a
 * complete match. The callback's nonzero return and waste_cancel stop it as in waste_generate. */
WASTE_API waste_status waste_generate_constrained(waste_model *model, const int32_t *prompt, size_t n_prompt,
                                                  const waste_generate_params *params,
                                                  const waste_constraint *constraint, waste_token_callback callback,
                                                  void *user, waste_generate_result *result, int32_t *complete);

typedef struct waste_tool {
  const char *name;         /* 1 to 64 characters from a-z, A-Z, 0-9, _ and -; unique among the tools */
  const char *description;  /* NULL = none */
  const char *parameters;   /* a JSON Schema object's text; NULL = {"type": "object", "properties": {}} */
} waste_tool;

/* waste_chat_apply with `tools` declared to the model (the chat format's declaration turn, as
 * `waste serve` renders a request's "tools"). The format needs tool-call markup (a "tools"
 * object in chat.json): else WASTE_ERR_UNSUPPORTED. n_tools == 0 is waste_chat_apply. */
WASTE_API waste_status waste_chat_apply_tools(const waste_model *model, const char *format_path,
                                              const waste_chat_message *messages, size_t n_messages,
                                              const waste_tool *tools, size_t n_tools, int32_t open_model_turn,
                                              char **text, size_t *text_len, int32_t **ids, size_t *n_ids);

/* One forced tool call, as `waste serve` generates it for tool_choice "required" (`tool_name`
 * NULL: the model picks one of `tools` through a grammar over their names) or a named function
 * (`tool_name`): the chat format's call markup is forced token by token (Kimi's special markers
 * included), the arguments are sampled under the tool's parameters schema, and the run ends with
 * the call. `prompt` is the chat prompt (waste_chat_apply_tools with the same tools and format);
 * `calls_in_history` is the number of calls already in the conversation (Kimi ids count from it).
 * Every token (forced ones too) goes to the callback; read the call back with
 * waste_parse_tool_calls. Errors: a format without tool-call markup (WASTE_ERR_UNSUPPORTED), an
 * unknown tool_name, no tools, a parameters schema the grammar engine refuses (naming
 * "tools[i].function.parameters"). */
WASTE_API waste_status waste_generate_tool_call(waste_model *model, const char *format_path, const int32_t *prompt,
                                                size_t n_prompt, const waste_generate_params *params,
                                                const waste_tool *tools, size_t n_tools, const char *tool_name,
                                                int32_t calls_in_history, waste_token_callback callback, void *user,
                                                waste_generate_result *result);

/* The tool calls in a model's answer (`len` bytes of `text`), read with the chat format's call
 * markup as `waste serve` reads them. *content gets the text outside the calls (NUL-terminated,
 * waste_free; "" when none) and *calls_json a JSON array (waste_free) of
 * {"id": ..., "name": ..., "arguments": ...}, arguments the model's raw text (not re-parsed;
 * the JSON style's calls get ids "call_0", "call_1", ...). A call with malformed markup is
 * given back as content. A format without tool-call markup: WASTE_ERR_UNSUPPORTED. */
WASTE_API waste_status waste_parse_tool_calls(const waste_model *model, const char *format_path, const char *text,
                                              size_t len, char **content, char **calls_json);

/* ---- sessions and stats ------------------------------------------------------------------ */

/* Writes the sequence state to `path` (atomically; the reference engine's session layout). */
WASTE_API waste_status waste_session_save(const waste_model *model, const char *path);
/* Restores a saved state; on any failure the sequence is left as it was. The next
 * waste_generate needs a non-empty prompt (no logits are kept in a session). */
WASTE_API waste_status waste_session_load(waste_model *model, const char *path);

typedef struct waste_stats {
  uint32_t struct_size;
  uint64_t experts_hit;    /* expert demands served from memory, since open */
  uint64_t experts_missed; /* ... that needed a read */
  uint64_t bytes_read;     /* record bytes read for this handle (incl. prefetch) */
  double io_wait_seconds;  /* time blocked on expert reads */
  int32_t last_tokens;     /* the last waste_generate: tokens generated */
  double last_tokens_per_second; /* ... and its decode rate (0 when none) */
} waste_stats;

WASTE_API void waste_stats_init(waste_stats *stats);
WASTE_API waste_status waste_get_stats(const waste_model *model, waste_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* WASTE_H */
