#!/usr/bin/python3
"""Seeded random nested JSON Schemas (every string, array and pattern bounded, so a random walk
ends well inside -n) x a random-weight tiny container x temperature 1: every
output of `waste run --json-schema` must parse and validate (python3-jsonschema, draft 2020-12).

usage: random_schemas.py WASTE_BIN [--schemas N] [--seed S]
Exit 0 when every output validates; prints each failure (schema, output, error) otherwise."""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import jsonschema

WORDS = ["id", "name", "kind", "value", "items", "a b", "x-y", "n\u00e9", "q\"t", "z"]


def gen_string(r):
    s = {"type": "string"}
    c = r.randrange(5)
    if c == 0:
        s["maxLength"] = r.randrange(0, 6)
    elif c == 1:
        s["minLength"] = r.randrange(0, 3)
        s["maxLength"] = s["minLength"] + r.randrange(0, 5)
    elif c == 2:
        s["pattern"] = r.choice(["^[a-c]{1,4}$", "^\\d{3}-\\d{2}$", "^(ab|cd){1,3}x?$", "^[^a-z]{0,3}$", "^\\w{1,8}$",
                                 "^.{2}$", "^[A-F0-9]{4}$"])
    else:
        s["maxLength"] = r.randrange(1, 12)
    return s


def gen_integer(r):
    s = {"type": "integer"}
    lo = r.randrange(-1000, 1000)
    c = r.randrange(4)
    if c == 0:
        s["minimum"], s["maximum"] = lo, lo + r.randrange(0, 3000)
    elif c == 1:
        s["exclusiveMinimum"], s["exclusiveMaximum"] = lo, lo + r.randrange(2, 200)
    elif c == 2:
        s["minimum"], s["maximum"] = -r.randrange(0, 20), r.randrange(0, 99999)
    else:
        s["minimum"], s["maximum"] = 0, r.randrange(1, 10)
    return s


def gen_leaf(r):
    c = r.randrange(9)
    if c == 0:
        return gen_string(r)
    if c == 1:
        return gen_integer(r)
    if c == 2:
        return {"type": "boolean"}
    if c == 3:
        return {"type": "null"}
    if c == 4:
        return {"enum": r.sample(["red", "green", 3, None, True, "blue", 2.5, [1, 2], {"k": "v"}], r.randrange(1, 4))}
    if c == 5:
        return {"const": r.choice(["fixed", 7, False, {"a": [1]}])}
    if c == 6:
        return {"type": ["string", "null"], "maxLength": r.randrange(1, 5)}
    if c == 7:
        return {"type": "integer", "minimum": 0, "maximum": r.randrange(1, 50)}
    return {"anyOf": [gen_integer(r), {"type": "string", "maxLength": 3}]}


def gen(r, depth):
    if depth <= 0:
        return gen_leaf(r)
    c = r.randrange(6)
    if c in (0, 1):
        props = {}
        for w in r.sample(WORDS, r.randrange(1, 5)):
            props[w] = gen(r, depth - 1)
        s = {"type": "object", "properties": props,
             "required": r.sample(sorted(props), r.randrange(0, len(props) + 1)), "additionalProperties": False}
        return s
    if c == 2:
        s = {"type": "array", "items": gen(r, depth - 1), "maxItems": r.randrange(0, 4)}
        if r.randrange(2):
            s["minItems"] = r.randrange(0, s["maxItems"] + 1)
        return s
    if c == 3:
        s = {"type": "array", "prefixItems": [gen(r, depth - 1) for _ in range(r.randrange(1, 3))]}
        s["items"] = False if r.randrange(2) else gen_leaf(r)
        if s["items"] is not False:
            s["maxItems"] = len(s["prefixItems"]) + r.randrange(0, 3)
        return s
    if c == 4:
        return {"oneOf": [{"type": "object", "properties": {"t": {"const": "a"}, "v": gen(r, depth - 1)},
                           "required": ["t", "v"], "additionalProperties": False},
                          {"type": "integer", "minimum": 0, "maximum": 9}]}
    return gen_leaf(r)


def gen_root(r, i):
    if i % 7 == 6:
        # $ref to $defs, recursive: a tree of bounded arrays.
        return {"$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer", "minimum": 0, "maximum": 99},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
            "required": ["v"], "additionalProperties": False}},
            "$ref": "#/$defs/node"}
    return gen(r, r.randrange(1, 4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("waste")
    ap.add_argument("--schemas", type=int, default=40)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("-v", "--verbose", action="store_true", help="print every output")
    args = ap.parse_args()
    r = random.Random(args.seed)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="waste-grammar-") as tmp:
        model = os.path.join(tmp, "tiny.waste")
        subprocess.run([args.waste, "synth", "--preset", "tiny", "--tokenizer", "--out", model], check=True,
                       capture_output=True, timeout=120)
        for i in range(args.schemas):
            schema = gen_root(r, i)
            path = os.path.join(tmp, "s%d.json" % i)
            with open(path, "w") as f:
                json.dump(schema, f)
            seed = 1 + i
            ran = subprocess.run([args.waste, "run", model, "Write JSON:", "--in-process", "--json-schema", path,
                                  "--temp", "1", "--seed", str(seed), "-n", "3000", "--json", "-q"],
                                 capture_output=True, timeout=300)
            why = None
            text = None
            if ran.returncode != 0:
                why = "exit %d: %s" % (ran.returncode, ran.stderr.decode(errors="replace"))
            else:
                doc = json.loads(ran.stdout)
                text = doc["text"]
                if not doc["grammar"]["complete"]:
                    why = "incomplete output (stop %s)" % doc["stop"]
                else:
                    try:
                        value = json.loads(text)
                        jsonschema.Draft202012Validator(schema).validate(value)
                    except Exception as e:  # noqa: BLE001 - any parse or validation error is a failure
                        why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0])
            if args.verbose:
                print("schema %d: %s\n  -> %r" % (i, json.dumps(schema), text))
            if why:
                failures += 1
                print("FAIL schema %d (seed %d): %s\n  schema: %s\n  output: %r" % (i, seed, why, json.dumps(schema), text))
    print("%d of %d outputs validated" % (args.schemas - failures, args.schemas))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
