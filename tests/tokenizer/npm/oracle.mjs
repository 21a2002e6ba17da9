// Reference side of the tiktoken equality test: the real tiktoken (Rust, compiled to WASM).
//
//   node oracle.mjs export ENCODING OUT_RANK_FILE
//       writes tiktoken's own ENCODING ranks (encoders/ENCODING.json) as a plain rank file,
//       and OUT_RANK_FILE.pat / OUT_RANK_FILE.specials.json beside it
//   node oracle.mjs compare RANK_FILE PATTERN_FILE SPECIALS_JSON plain|markup CORPUS OURS_JSON
//       encodes every corpus line with tiktoken and compares with our ids, token for token
import fs from "node:fs";
import { createRequire } from "node:module";
import { Tiktoken } from "tiktoken/lite";

const require = createRequire(import.meta.url);

function exportEncoding(name, out) {
  const data = require(`tiktoken/encoders/${name}.json`);
  // The package stores ranks compactly: "! START tok tok ..." gives consecutive ranks from START.
  const fields = data.bpe_ranks.split(" ");
  const lines = [];
  let rank = 0;
  for (let i = 0; i < fields.length; i++) {
    if (fields[i] === "!") {
      rank = Number(fields[++i]);
      continue;
    }
    lines.push(`${fields[i]} ${rank++}`);
  }
  fs.writeFileSync(out, lines.join("\n") + "\n");
  fs.writeFileSync(out + ".pat", data.pat_str);
  const specials = Object.entries(data.special_tokens).map(([text, id]) => ({ id, text }));
  specials.sort((a, b) => a.id - b.id);
  fs.writeFileSync(out + ".specials.json", JSON.stringify(specials, null, 1) + "\n");
}

function compare(rankFile, patternFile, specialsFile, mode, corpusFile, oursFile) {
  const ranks = fs.readFileSync(rankFile, "utf8");
  const pattern = fs.readFileSync(patternFile, "utf8").replace(/\n$/, "");
  const specials = {};
  for (const { id, text } of JSON.parse(fs.readFileSync(specialsFile, "utf8"))) specials[text] = id;
  const enc = new Tiktoken(ranks, specials, pattern);
  const corpus = fs.readFileSync(corpusFile, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
  const ours = JSON.parse(fs.readFileSync(oursFile, "utf8"));
  if (ours.length !== corpus.length) {
    console.error(`ours has ${ours.length} lines, the corpus ${corpus.length}`);
    return 1;
  }
  let bad = 0, tokens = 0;
  corpus.forEach((text, i) => {
    const theirs = Array.from(mode === "plain" ? enc.encode_ordinary(text) : enc.encode(text, "all"));
    tokens += theirs.length;
    const mine = ours[i];
    if (theirs.length === mine.length && theirs.every((v, k) => v === mine[k])) return;
    if (++bad <= 5) {
      let k = 0;
      while (k < theirs.length && theirs[k] === mine[k]) k++;
      const dec = (ids) => ids.map((id) => JSON.stringify(new TextDecoder().decode(enc.decode(new Uint32Array([id])))));
      console.error(`line ${i + 1} ${JSON.stringify(text.slice(0, 80))}: first difference at token ${k}`);
      console.error(`  tiktoken: ${dec(theirs.slice(k, k + 6)).join(" ")}`);
      console.error(`  ours:     ${dec(mine.slice(k, k + 6)).join(" ")}`);
    }
  });
  enc.free();
  console.log(`${corpus.length - bad}/${corpus.length} lines identical (${tokens} tiktoken tokens, ${mode} mode)`);
  return bad === 0 ? 0 : 1;
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === "export" && args.length === 2) {
  exportEncoding(...args);
} else if (cmd === "compare" && args.length === 6) {
  process.exitCode = compare(...args);
} else {
  console.error("usage: oracle.mjs export ENCODING OUT | compare RANKS PATTERN SPECIALS plain|markup CORPUS OURS");
  process.exitCode = 2;
}
