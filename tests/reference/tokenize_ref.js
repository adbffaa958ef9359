// The reference for tokenizer/reference_test.cc and bench/tokenizer_bench:
// Hugging Face's Rust `tokenizers` (the @anush008/tokenizers Node binding,
// installed by scripts/setup under BUILD/npm).
//
//   node tokenize_ref.js encode TOKENIZER.json INPUT.json OUTPUT.json
//     INPUT: a JSON list of strings. OUTPUT: {"ids": [[...]], "decoded": [...]}
//     (ids without special tokens; decoded = decode(ids, false)).
//   node tokenize_ref.js bench TOKENIZER.json TEXT_FILE REPEATS BATCH [LINES_PER_TEXT]
//     Encodes the file's lines (LINES_PER_TEXT lines per text) in batches (encodeBatch: the library's own
//     thread pool, RAYON_NUM_THREADS threads) and prints
//     {"bytes": B, "tokens": T, "seconds": S} for the best of REPEATS runs.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

async function main() {
  const [mode, tokPath, input, a, b, c] = process.argv.slice(2);
  const t = await Tokenizer.fromFile(tokPath);
  if (mode === 'encode') {
    const texts = JSON.parse(fs.readFileSync(input, 'utf8'));
    const ids = [], decoded = [];
    for (const text of texts) {
      const e = await t.encode(text, null, { addSpecialTokens: false });
      const v = Array.from(e.getIds());
      ids.push(v);
      decoded.push(await t.decode(v, false));
    }
    fs.writeFileSync(a, JSON.stringify({ ids, decoded }));
  } else if (mode === 'bench') {
    const text = fs.readFileSync(input, 'utf8');
    const perText = parseInt(c || '1', 10);
    const rawLines = text.split(/(?<=\n)/);
    const lines = [];
    for (let i = 0; i < rawLines.length; i += perText) lines.push(rawLines.slice(i, i + perText).join(''));
    const repeats = parseInt(a, 10), batch = parseInt(b, 10);
    let best = Infinity, tokens = 0;
    for (let r = 0; r < repeats; ++r) {
      const start = process.hrtime.bigint();
      let n = 0;
      for (let i = 0; i < lines.length; i += batch) {
        const out = await t.encodeBatch(lines.slice(i, i + batch), { addSpecialTokens: false });
        for (const e of out) n += e.getIds().length;
      }
      const s = Number(process.hrtime.bigint() - start) / 1e9;
      best = Math.min(best, s);
      tokens = n;
    }
    console.log(JSON.stringify({ bytes: Buffer.byteLength(text, 'utf8'), tokens, seconds: best }));
  } else {
    throw new Error('mode must be encode or bench');
  }
}
main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
