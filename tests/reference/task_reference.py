#!/usr/bin/python3
"""An independent reference for `hilnas eval --task`.

Writes a small random Llama checkpoint (Hugging Face layout) with the demo
backbone's byte-level tokenizer.json (one id per UTF-8 byte), three
hand-made tasks (multiple choice zero-shot, multiple choice 3-shot with
labels, generation with stop sequences), and scores them here in float64
from lm-evaluation-harness's rules, written out again in plain Python (not
hilnas's code, not the harness): HFLM's context/continuation encoding,
few-shot examples from random.Random(1234).sample, acc / acc_norm, greedy
generation cut at the first stop sequence, exact match after the task's
normalisation. Then checks that `hilnas eval --task ... --samples-out`
gives the same per-item choices and generations, and log-likelihoods within
1e-4 nats.

    /usr/bin/python3 tests/reference/task_reference.py BUILD/tools/hilnas SOURCE_DIR [WORKDIR]
"""
import json
import os
import random
import re
import shutil
import string
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hf  # noqa: E402  (the float forward and checkpoint writer)

TOLERANCE = 1e-4


def config():
    cfg = hf.llama3_config()
    cfg.update({"vocab_size": 256, "rope_scaling": None, "num_hidden_layers": 2,
                "tie_word_embeddings": True})
    return cfg


def logprobs(cfg, w64, ids):
    with torch.no_grad():
        return torch.log_softmax(hf.forward(cfg, w64, ids).double(), -1)


def encode(text):
    return list(text.encode("utf-8"))


def loglikelihood(cfg, w64, context, continuation):
    # HFLM._encode_pair: trailing spaces of the context go to the continuation.
    n = len(context) - len(context.rstrip())
    if n:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = encode(context + continuation)
    ctx = encode(context)
    cont = whole[len(ctx):]
    ids = (ctx + cont)[:-1]
    lp = logprobs(cfg, w64, ids)
    return sum(lp[len(ids) - len(cont) + i, t].item() for i, t in enumerate(cont))


def fewshot_prefix(rnd, docs, doc, k, render, delim=" ", fewshot_delim="\n\n"):
    if k == 0:
        return ""
    chosen = [d for d in rnd.sample(docs, k + 1) if d != doc][:k]
    return fewshot_delim.join(render(d)[0] + delim + render(d)[1] for d in chosen) + fewshot_delim


def greedy(cfg, w64, prompt, until, max_new):
    ids = encode(prompt)
    out = []
    for _ in range(max_new):
        lp = logprobs(cfg, w64, ids + out)
        out.append(int(lp[-1].argmax()))
        text = bytes(out).decode("utf-8", errors="replace")
        if any(u in text for u in until):
            break
    text = bytes(out).decode("utf-8", errors="replace")
    for u in until:
        text = text.split(u)[0]
    return text.lstrip()


def normalise(s, regexes, ignore_case, ignore_punct):
    for r in regexes:
        s = re.sub(r, "", s)
    if ignore_case:
        s = s.lower()
    if ignore_punct:
        s = s.translate(str.maketrans("", "", string.punctuation))
    return s


def write_jsonl(path, docs):
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")


def main():
    hilnas, source = sys.argv[1], sys.argv[2]
    work = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="hilnas-task-ref-")
    os.makedirs(work, exist_ok=True)
    cfg = config()
    gen = torch.Generator().manual_seed(38)
    folder = os.path.join(work, "ckpt")
    w = hf.write_checkpoint(folder, cfg, hf.make_weights(cfg, gen), 1, torch.float32)
    w64 = {k: t.double() for k, t in w.items()}
    shutil.copy(os.path.join(source, "data/demo-backbone/tokenizer.json"), folder)

    words = ["river", "stone", "cloud", "green", "seven", "music", "paper", "light", "table", "north"]
    rnd = random.Random(5)
    # 1. Multiple choice, zero-shot, three choices, an integer gold.
    mc = [{"q": f"The {rnd.choice(words)} is near the", "c": [rnd.choice(words) for _ in range(3)],
           "g": i % 3} for i in range(12)]
    write_jsonl(os.path.join(work, "mc.jsonl"), mc)
    with open(os.path.join(work, "mc.textproto"), "w") as f:
        f.write('name: "mc" data: "mc.jsonl" context: "Q: {{q}}\\nA:" choices_field: "c" gold_field: "g"\n')
    # 2. Multiple choice, 3-shot, labels ("A".."C") and a trailing space in
    # the context (moved to the continuation).
    fs = [{"question": f"Which word: {rnd.choice(words)}?", "options": [rnd.choice(words) for _ in range(3)],
           "answerKey": "ABC"[i % 3]} for i in range(10)]
    write_jsonl(os.path.join(work, "fs.jsonl"), fs)
    with open(os.path.join(work, "fs.textproto"), "w") as f:
        f.write('name: "fs" data: "fs.jsonl" context: "{{question}} Answer: " choices_field: "options"\n'
                'gold_field: "answerKey" gold_labels: "A" gold_labels: "B" gold_labels: "C" num_fewshot: 3\n')
    # 3. Generation, 2-shot, stop sequences, exact match ignoring case and punctuation.
    ge = [{"question": f"Say {w_}", "answer": [w_.upper(), w_ + "!"]} for w_ in words[:6]]
    write_jsonl(os.path.join(work, "gen.jsonl"), ge)
    render_gen = lambda d: (f"Q: {d['question']}\nA:", d["answer"][0])

    def reference_generations(until):
        rng = random.Random(1234)
        return [greedy(cfg, w64, fewshot_prefix(rng, ge, d, 2, render_gen) + render_gen(d)[0], until, 12)
                for d in ge]
    # A random model rarely writes "\n" or "."; a third stop sequence, a
    # letter it does write mid-way, makes sure cutting at a stop is tested.
    until = ["\n", "."]
    free = reference_generations(until)
    stop = next(ch for g in free for ch in g[2:] if ch.isascii() and ch.isalnum())
    until.append(stop)
    expected = reference_generations(until)
    print(f"     gen: stop sequences {until!r}; {sum(len(a) < len(b) for a, b in zip(expected, free))} "
          f"of {len(ge)} generations stop early")
    with open(os.path.join(work, "gen.textproto"), "w") as f:
        f.write('name: "gen" kind: GENERATE_UNTIL data: "gen.jsonl" context: "Q: {{question}}\\nA:"\n'
                f'answers_field: "answer" num_fewshot: 2 until: "\\n" until: "." until: "{stop}"\n'
                'max_gen_tokens: 12 ignore_case: true ignore_punctuation: true\n')

    samples_path = os.path.join(work, "samples.json")
    r = subprocess.run([hilnas, "eval", "--ckpt", folder, "--task", os.path.join(work, "mc.textproto"),
                        os.path.join(work, "fs.textproto"), os.path.join(work, "gen.textproto"),
                        "--samples-out", samples_path, "--json", "--threads", "1"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"hilnas eval --task failed:\n{r.stdout}{r.stderr}")
    got = json.load(open(samples_path))
    table = json.loads(r.stdout)
    ok = True

    def check_mc(name, docs, render, gold_of, k):
        nonlocal ok
        rng = random.Random(1234)
        worst, same, acc = 0.0, True, []
        for i, doc in enumerate(docs):
            prefix = fewshot_prefix(rng, docs, doc, k, render)
            ctx = prefix + render(doc)[0]
            choices = render(doc)[2]
            lls = [loglikelihood(cfg, w64, ctx, " " + c) for c in choices]
            h = got[name][i]
            worst = max(worst, max(abs(a - b) for a, b in zip(lls, h["loglikelihoods"])))
            pred = max(range(len(lls)), key=lambda j: (lls[j], -j))
            norm = [ll / len(c) for ll, c in zip(lls, choices)]
            pred_norm = max(range(len(norm)), key=lambda j: (norm[j], -j))
            same &= pred == h["pred"] and pred_norm == h["pred_norm"] and gold_of(doc) == h["gold"]
            acc.append(float(pred == gold_of(doc)))
        reported = next(row["value"] for row in table if row["task"] == name and row["metric"] == "acc")
        passed = worst <= TOLERANCE and same and abs(reported - sum(acc) / len(acc)) < 1e-12
        ok &= passed
        print(f"{'ok  ' if passed else 'FAIL'} {name}: {len(docs)} items, max |hilnas - reference| "
              f"log-likelihood {worst:.2e} (tolerance {TOLERANCE:g}), choices identical: {same}, "
              f"acc {reported:.4f}")

    check_mc("mc", mc, lambda d: (f"Q: {d['q']}\nA:", d["c"][d["g"]], d["c"]), lambda d: d["g"], 0)
    check_mc("fs", fs, lambda d: (f"{d['question']} Answer: ", d["options"]["ABC".index(d["answerKey"])],
                                  d["options"]), lambda d: "ABC".index(d["answerKey"]), 3)

    same = True
    for i, doc in enumerate(ge):
        text = expected[i]
        match = any(normalise(text, [], True, True) == normalise(a, [], True, True) for a in doc["answer"])
        h = got["gen"][i]
        if text != h["generation"] or match != h["correct"]:
            same = False
            print(f"  gen item {i}: reference {text!r} ({match}), hilnas {h['generation']!r} ({h['correct']})")
    ok &= same
    print(f"{'ok  ' if same else 'FAIL'} gen: {len(ge)} greedy generations and exact matches identical")

    # Bad data is named by file, line and field.
    write_jsonl(os.path.join(work, "bad.jsonl"), [mc[0], {"q": "x", "c": ["a", "b"], "g": 5}])
    with open(os.path.join(work, "bad.textproto"), "w") as f:
        f.write('data: "bad.jsonl" context: "{{q}}" choices_field: "c" gold_field: "g"\n')
    r = subprocess.run([hilnas, "eval", "--ckpt", folder, "--task", os.path.join(work, "bad.textproto")],
                       capture_output=True, text=True)
    named = r.returncode != 0 and "bad.jsonl:2: gold 5 (field 'g') is out of range" in r.stderr + r.stdout
    ok &= named
    print(f"{'ok  ' if named else 'FAIL'} a gold out of range is refused naming file, line and field")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
