#!/usr/bin/env python3
"""Streams tokens from a WASTE container through libwaste.so with ctypes (no engine in Python).

    python3 stream.py MODEL.waste "prompt text" [TOKENS [BARRIER_DIR]]

$WASTE_LIB names the library (default: libwaste.so.0 on the loader's path). Same behaviour as
examples/c/stream.c, BARRIER_DIR included.
"""
import ctypes
import os
import sys
import time


class OpenOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("mode", ctypes.c_int32), ("ctx_tokens", ctypes.c_int32),
                ("threads", ctypes.c_int32), ("budget", ctypes.c_char_p), ("verify", ctypes.c_int32),
                ("direct_io", ctypes.c_int32), ("linger_ms", ctypes.c_int32), ("allow_spawn", ctypes.c_int32),
                ("cache_records", ctypes.c_int64)]


class ModelInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("arch", ctypes.c_char * 32), ("expert_format", ctypes.c_char * 8),
                ("kernel_isa", ctypes.c_char * 16)] + [
                   (name, ctypes.c_int32) for name in
                   ("n_layers", "n_moe_layers", "hidden", "vocab", "n_experts", "top_k", "ctx_tokens", "threads",
                    "position", "has_tokenizer", "has_chat_format", "bos", "eos", "daemon_pid", "daemon_spawned")
               ] + [("record_bytes", ctypes.c_uint64)]


class GenerateParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("max_tokens", ctypes.c_int32), ("temperature", ctypes.c_float),
                ("top_p", ctypes.c_float), ("top_k", ctypes.c_int32), ("seed", ctypes.c_uint64),
                ("stop_tokens", ctypes.POINTER(ctypes.c_int32)), ("n_stop_tokens", ctypes.c_size_t),
                ("ignore_eos", ctypes.c_int32)]


class GenerateResult(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("n_tokens", ctypes.c_int32), ("stop_reason", ctypes.c_int32),
                ("prompt_tokens", ctypes.c_int32), ("prompt_seconds", ctypes.c_double),
                ("generate_seconds", ctypes.c_double)]


TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_char),
                                  ctypes.c_size_t)

lib = ctypes.CDLL(os.environ.get("WASTE_LIB", "libwaste.so.0"))
lib.waste_last_error.restype = ctypes.c_char_p
lib.waste_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(OpenOptions), ctypes.POINTER(ctypes.c_void_p)]
lib.waste_close.argtypes = [ctypes.c_void_p]
lib.waste_get_model_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(ModelInfo)]
lib.waste_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                               ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t)]
lib.waste_generate.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                               ctypes.POINTER(GenerateParams), TOKEN_CALLBACK, ctypes.c_void_p,
                               ctypes.POINTER(GenerateResult)]
lib.waste_free.argtypes = [ctypes.c_void_p]
for init, struct in (("waste_open_options_init", OpenOptions), ("waste_model_info_init", ModelInfo),
                     ("waste_generate_params_init", GenerateParams), ("waste_generate_result_init", GenerateResult)):
    getattr(lib, init).argtypes = [ctypes.POINTER(struct)]
    getattr(lib, init).restype = None

WASTE_TOKENIZE_BOS = 1


def check(status):
    if status != 0:
        sys.exit("stream.py: " + lib.waste_last_error().decode("utf-8", "replace"))


def wait_for_go(directory):
    open(os.path.join(directory, "ready.%d" % os.getpid()), "w").close()
    for _ in range(6000):
        if os.path.exists(os.path.join(directory, "go")):
            return
        time.sleep(0.01)
    sys.exit("stream.py: no %s/go within 60 s" % directory)


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: stream.py MODEL.waste PROMPT [TOKENS [BARRIER_DIR]]")
    options = OpenOptions()
    lib.waste_open_options_init(ctypes.byref(options))
    options.ctx_tokens = 256
    model = ctypes.c_void_p()
    check(lib.waste_open(sys.argv[1].encode(), ctypes.byref(options), ctypes.byref(model)))
    try:
        info = ModelInfo()
        lib.waste_model_info_init(ctypes.byref(info))
        check(lib.waste_get_model_info(model, ctypes.byref(info)))
        if len(sys.argv) > 4:
            wait_for_go(sys.argv[4])
        prompt = sys.argv[2].encode()
        ids = ctypes.POINTER(ctypes.c_int32)()
        n_ids = ctypes.c_size_t()
        check(lib.waste_tokenize(model, prompt, len(prompt), WASTE_TOKENIZE_BOS, ctypes.byref(ids), ctypes.byref(n_ids)))
        params = GenerateParams()
        lib.waste_generate_params_init(ctypes.byref(params))
        params.max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 16
        params.ignore_eos = 1
        result = GenerateResult()
        lib.waste_generate_result_init(ctypes.byref(result))

        def on_token(_user, _token, piece, length):
            sys.stdout.buffer.write(ctypes.string_at(piece, length))
            sys.stdout.flush()
            return 0  # continue

        callback = TOKEN_CALLBACK(on_token)
        status = lib.waste_generate(model, ids, n_ids.value, ctypes.byref(params), callback, None, ctypes.byref(result))
        lib.waste_free(ids)
        check(status)
        print()
        print("tokens %d  daemon pid %d  spawned %d" % (result.n_tokens, info.daemon_pid, info.daemon_spawned),
              file=sys.stderr)
    finally:
        lib.waste_close(model)


if __name__ == "__main__":
    main()
