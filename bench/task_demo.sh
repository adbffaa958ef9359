#!/usr/bin/env bash
# Task accuracy on the demo backbone and pruned candidates of the demo
# search space (issue 38): a 4-way cloze task built from the demo's own
# held-out text (the fortunes at the end of the demo corpus: the last 5% the
# trainer holds out), scored by `hilnas eval --task` next to each
# candidate's held-out loss, each candidate pruned and trained as the demo
# campaign trains a trial (configs/demo-campaign.textproto: 8 steps).
#
# Then the demo campaign's own front (`hilnas demo`): every evaluated trial
# trained again by the campaign's in-process evaluator and scored at the
# campaign's deployment precision (q4_0 weights, q8_0 KV cache) by
# `hilnas pareto report --task --all`.
#
#   bash bench/task_demo.sh [BUILD]      # after the build; writes BUILD/task-demo/
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
H=$BUILD/tools/hilnas
W=$BUILD/task-demo
mkdir -p "$W"

# The cloze items: every held-out fortune of at least 8 words whose last 3
# words hold one of 5+ letters; the context is all but those 3 words, the
# gold continuation the 3 words, and the 3 distractors the same words with
# their inner letters shuffled (seeded), so a choice is told by how well
# the model spells and continues, which is what a byte model learns first.
python3 - "$W" <<'PY'
import json, random, sys
w = sys.argv[1]
docs = []
for name in ["work", "zippy"]:
    text = open(f"/usr/share/games/fortunes/{name}", encoding="utf-8", errors="replace").read()
    for f in text.split("\n%\n"):
        words = " ".join(f.split()).split(" ")
        if 8 <= len(words) <= 60:
            docs.append(words)
docs = docs[len(docs) // 3:]  # "work" begins before the held-out tail
docs = [d for d in docs if max(len(x.strip(".,;:!?\"'")) for x in d[-3:]) >= 5]
rnd = random.Random(38)

def scramble(word):
    core = list(word[1:-1])
    if len(set(core)) < 2:
        return word
    while True:
        rnd.shuffle(core)
        if "".join(core) != word[1:-1]:
            return word[0] + "".join(core) + word[-1]

items = []
for words in docs:
    gold = " ".join(words[-3:])
    others = []
    for _ in range(200):
        o = " ".join(scramble(x) for x in words[-3:])
        if o != gold and o not in others:
            others.append(o)
        if len(others) == 3:
            break
    if len(others) == 3:
        items.append((words, gold, others))
docs = [words for words, _, _ in items]
with open(f"{w}/cloze.jsonl", "w") as out:
    for words, gold, others in items:
        choices = others + [gold]
        rnd.shuffle(choices)
        out.write(json.dumps({"context": " ".join(words[:-3]), "endings": choices,
                              "label": choices.index(gold)}) + "\n")
with open(f"{w}/heldout.txt", "w") as out:
    out.write("\n".join(" ".join(d) for d in docs) + "\n")
print(f"{len(docs)} cloze items from held-out fortunes", file=sys.stderr)
PY
cat > "$W/cloze.textproto" <<'EOF2'
# 4-way cloze over held-out fortunes (bench/task_demo.sh).
name: "fortune_cloze"
data: "cloze.jsonl"
context: "{{context}}"
choices_field: "endings"
gold_field: "label"
EOF2

[ -f "$W/corpus.bin" ] || $H corpus --out "$W/corpus.bin" >/dev/null
# Candidates in the demo campaign's space (layers 2..8, d_model 128..256,
# d_ffn 128..768), from the backbone down.
candidates=(
  "backbone"
  "8 256 512"
  "6 256 768"
  "6 192 512"
  "4 256 512"
  "4 192 384"
  "3 128 256"
  "2 128 128"
)
echo "| candidate | layers | d_model | d_ffn | held-out loss (nats/byte) | cloze acc | stderr | acc_norm | stderr | n |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for c in "${candidates[@]}"; do
  if [ "$c" = backbone ]; then
    ck=data/demo-backbone; name=backbone; set -- 8 256 768
  else
    set -- $c
    name="L$1-d$2-f$3"; ck=$W/$name
    if [ ! -f "$ck/trained/config.json" ]; then
      $H prune --base data/demo-backbone --layers "$1" --d-model "$2" --d-ffn "$3" \
          --pattern "$(printf 'F%.0s' $(seq 1 "$1"))" --block-size 64 --out "$ck/pruned" --overwrite >/dev/null
      $H train --ckpt "$ck/pruned" --tokens "$W/corpus.bin" --steps 8 --batch-size 8 --seq-len 128 \
          --lr 1e-3 --warmup-steps 2 --out "$ck/trained" --overwrite >/dev/null 2>&1
    fi
    ck=$ck/trained
  fi
  loss=$($H eval --ckpt "$ck" --text "$W/heldout.txt" 2>/dev/null | sed -n 's/.*held-out loss \([0-9.]*\).*/\1/p')
  $H eval --ckpt "$ck" --task "$W/cloze.textproto" --json 2>/dev/null > "$W/$name.json"
  python3 - "$W/$name.json" "$name" "$1" "$2" "$3" "$loss" <<'PY'
import json, sys
rows = {r["metric"]: r for r in json.load(open(sys.argv[1]))}
a, n = rows["acc"], rows["acc_norm"]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | {float(sys.argv[6]):.4f} | "
      f"{a['value']:.4f} | {a['stderr']:.4f} | {n['value']:.4f} | {n['stderr']:.4f} | {a['n']} |")
PY
done

echo
echo "The demo campaign's front: hilnas pareto report demo --task cloze --all"
[ -f "$W/demo/demo.db" ] || $H demo --out "$W/demo" > "$W/demo.log" 2>&1
$H pareto report demo --db "$W/demo/demo.db" --task "$W/cloze.textproto" --all \
    --work-dir "$W/report" --out "$W/front-tasks.csv" 2> "$W/report.log"
