#!/usr/bin/env python3
"""Train kjv-mini: a small Kimi-Linear model on the King James Bible (CPU, PyTorch).

  train.py --out DIR [--minutes 45] [--seed 0] [--threads 2]

Reads the text from Debian's bible-kjv (`bible`), holds out Jude and Revelation, trains a
byte-level BPE (4089 ranks + 7 specials = 4096 ids, the Kimi pre-tokenizer pattern), then the
model (model.py) for a wall-clock budget, and writes a Hugging Face checkpoint to DIR:
config.json, model.safetensors (bf16; e_score_correction_bias f32), tiktoken.model,
tokenizer_config.json, chat_template.jinja, train_log.txt. An intermediate checkpoint is
written every --save-minutes, so a killed run still leaves a usable model.

A fifth of the training sequences are chat turns (user: the first words of a verse; assistant:
the rest of it, sometimes the next verse, then <|im_end|>), so `waste run` with the container's
chat format continues a verse.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))
import kjv_data as kd  # noqa: E402
from model import KimiMini  # noqa: E402

N_RANKS = 4089
CONFIG = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
    "num_hidden_layers": 4, "hidden_size": 256, "vocab_size": N_RANKS + len(kd.SPECIALS),
    "first_k_dense_replace": 1, "intermediate_size": 768, "moe_intermediate_size": 128,
    "num_experts": 16, "num_experts_per_token": 2, "num_shared_experts": 1,
    "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 1.0,
    "num_attention_heads": 4, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
    "kv_lora_rank": 64, "q_lora_rank": None, "mla_use_nope": True, "rms_norm_eps": 1e-5,
    "hidden_act": "silu", "bos_token_id": N_RANKS, "eos_token_id": N_RANKS + 2,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "linear_attn_config": {"head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
                           "kda_layers": [1, 2, 4], "full_attn_layers": [3]},
}
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{{ message['content'] }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}\n")


class Log:
    def __init__(self, path):
        self.f = open(path, "w")

    def __call__(self, msg):
        print(msg, flush=True)
        self.f.write(msg + "\n")
        self.f.flush()


def bf16_bytes(t):
    return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()


def write_checkpoint(model, out):
    from make_checkpoint import write_safetensors  # the reference writer (sorted names, 8-byte header pad)
    tensors = {}
    for name, t in model.hf_state().items():
        if name.endswith("e_score_correction_bias"):
            tensors[name] = ("F32", list(t.shape), t.float().numpy().astype("<f4").tobytes())
        else:
            tensors[name] = ("BF16", list(t.shape), bf16_bytes(t.float()))
    tmp = os.path.join(out, "model.safetensors.tmp")
    write_safetensors(tmp, tensors)
    os.replace(tmp, os.path.join(out, "model.safetensors"))


def write_tokenizer(out, vocab):
    kd.write_tiktoken(os.path.join(out, "tiktoken.model"), vocab)
    added = {str(N_RANKS + i): {"content": s, "special": True} for i, s in enumerate(kd.SPECIALS)}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"added_tokens_decoder": added, "tokenizer_class": "TikTokenTokenizer",
                   "bos_token": "[BOS]", "eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE},
                  f, indent=1)
    with open(os.path.join(out, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)


class Batches:
    """Plain windows starting at a verse, and packed chat turns, from one seeded generator."""

    def __init__(self, enc, verses, T, seed, chat_frac=0.2):
        self.enc, self.T, self.chat_frac = enc, T, chat_frac
        self.rng = random.Random(seed)
        self.texts = [v[3] for v in verses]
        self.stream, self.starts = [], []
        for t in self.texts:
            self.starts.append(len(self.stream))
            self.stream.extend(enc.encode(t + "\n"))
        self.n_tokens = len(self.stream)

    def chat_turn(self):
        i = self.rng.randrange(len(self.texts) - 1)
        words = self.texts[i].split(" ")
        if len(words) < 3:
            return None
        n = self.rng.randint(2, min(9, len(words) - 1))
        reply = " " + " ".join(words[n:])
        if self.rng.random() < 0.5:
            reply += "\n" + self.texts[i + 1]
        return self.enc.encode_markup(kd.USER + " ".join(words[:n]) + kd.END + kd.ASSISTANT + reply + kd.END)

    def sequence(self):
        need = self.T + 1
        if self.rng.random() < self.chat_frac:
            seq = []
            while len(seq) < need:
                turn = self.chat_turn()
                if turn:
                    seq.extend(turn)
            return seq[:need]
        s = self.starts[self.rng.randrange(len(self.starts))]
        s = min(s, self.n_tokens - need)
        return self.stream[s:s + need]

    def batch(self, B):
        x = torch.tensor([self.sequence() for _ in range(B)], dtype=torch.long)
        return x[:, :-1], x[:, 1:]


def held_out_windows(enc, verses, T):
    ids = []
    for v in verses:
        ids.extend(enc.encode(v[3] + "\n"))
    n = (len(ids) - 1) // T
    x = torch.tensor(ids[:n * T + 1])
    return x[:-1].view(n, T), x[1:].view(n, T)


@torch.no_grad()
def evaluate(model, xs, ys, max_windows=None, B=16):
    model.eval()
    n = xs.shape[0] if max_windows is None else min(max_windows, xs.shape[0])
    tot, cnt = 0.0, 0
    for i in range(0, n, B):
        logits = model(xs[i:i + B])
        tot += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                       ys[i:i + B].reshape(-1), reduction="sum"))
        cnt += ys[i:i + B].numel()
    model.train()
    return tot / cnt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=45.0, help="wall-clock training budget")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--save-minutes", type=float, default=10.0)
    ap.add_argument("--bias-rate", type=float, default=1e-2,
                    help="e_score_correction_bias step per training step (DeepSeek-V3 uses 1e-3 "
                         "over far more steps; 1e-3 left one expert with ~half the slots after 60 steps here)")
    args = ap.parse_args()
    t0 = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "train_log.txt"))
    log(f"kjv-mini train.py: seed {args.seed}, threads {args.threads}, budget {args.minutes} min, "
        f"batch {args.batch} x {args.seq}, lr {args.lr}, bias rate {args.bias_rate}, torch {torch.__version__}, "
        f"start {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(t0))}, load {os.getloadavg()}")

    verses = kd.read_kjv()
    train_v, held_v = kd.split(verses)
    books = kd.books_in_order(verses)
    log(f"train books ({len(books) - len(kd.HELD_OUT)}): " + " ".join(b for b in books if b not in kd.HELD_OUT))
    log(f"held-out books ({len(kd.HELD_OUT)}): " + " ".join(kd.HELD_OUT))
    log(f"verses: {len(train_v)} train, {len(held_v)} held out")

    train_text = "\n".join(v[3] for v in train_v) + "\n"
    vocab = kd.train_bpe(train_text, N_RANKS)
    enc = kd.Encoder(vocab)
    write_tokenizer(args.out, vocab)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)
    data = Batches(enc, train_v, args.seq, args.seed)
    hx, hy = held_out_windows(enc, held_v, args.seq)
    log(f"BPE: {len(vocab)} ranks + {len(kd.SPECIALS)} specials; train {data.n_tokens} tokens, "
        f"held out {hy.numel()} tokens in {hx.shape[0]} windows ({time.time() - t0:.0f} s)")

    model = KimiMini(CONFIG)
    n_par = sum(p.numel() for p in model.parameters())
    log(f"parameters: {n_par} ({n_par * 2 / 1e6:.1f} MB bf16)")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    budget = args.minutes * 60.0
    t_train = time.time()
    last_save, step, seen, avg = t_train, 0, 0, None
    warmup = 50
    while True:
        frac = (time.time() - t_train) / budget
        if frac >= 1.0:
            break
        lr = args.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = data.batch(args.batch)
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for moe in model.moe_layers():
            moe.update_bias(args.bias_rate)
        step += 1
        seen += y.numel()
        avg = float(loss) if avg is None else 0.95 * avg + 0.05 * float(loss)
        if step % 20 == 0 or step == 1:
            loads = [m.last_load for m in model.moe_layers()]
            imb = " ".join(f"{float(l.max() / l.mean()):.2f}" for l in loads)
            log(f"step {step} loss {float(loss):.4f} avg {avg:.4f} lr {lr:.2e} tokens {seen} "
                f"wall {time.time() - t0:.0f} s load {os.getloadavg()[0]:.2f} max/mean expert load per MoE layer {imb}")
        if step % 200 == 0:
            log(f"step {step} held-out loss (first 32 windows) {evaluate(model, hx, hy, 32):.4f}")
        if time.time() - last_save > args.save_minutes * 60:
            write_checkpoint(model, args.out)
            last_save = time.time()
            log(f"step {step} intermediate checkpoint written")
    write_checkpoint(model, args.out)
    # The held-out figure of the committed weights: bf16-rounded, as the checkpoint stores them.
    sd = {k: (v.to(torch.bfloat16).float() if not k.endswith("e_score_correction_bias") else v)
          for k, v in model.hf_state().items()}
    model.load_hf_state(sd)
    ho = evaluate(model, hx, hy)
    log(f"done: {step} steps, {seen} tokens ({seen / data.n_tokens:.2f} epochs), "
        f"train wall {time.time() - t_train:.0f} s, total {time.time() - t0:.0f} s, load {os.getloadavg()}")
    log(f"final held-out loss (Jude + Revelation, bf16 weights, {hy.numel()} tokens in windows of "
        f"{args.seq}): {ho:.4f} nats/token, perplexity {math.exp(ho):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
