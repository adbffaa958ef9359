#!/usr/bin/env bash
# The scaled-down demo campaign on a backbone written from a config.json
# (random weights), shared by bench/gemma_demo.sh and
# bench/mobilellm_pro_demo.sh (issue 40): `hilnas checkpoint init` writes the
# backbone, the demo corpus calibrates it, and `hilnas demo` searches it with
# configs/demo-campaign.textproto cut to 8 latency points and 6 trials,
# window and full layers only.
#
#   bash bench/family_demo.sh OUT CAMPAIGN_NAME [SED_EXPRESSION...]
#
# OUT must hold config.json; each SED_EXPRESSION edits the campaign further
# (the space's base must match the backbone's fixed fields).
set -euo pipefail
cd "$(dirname "$0")/.."
B="$PWD/build/tools/hilnas"
OUT="$1"
NAME="$2"
shift 2
EDITS=()
for e in "$@"; do EDITS+=(-e "$e"); done
"$B" checkpoint init --arch "$OUT/config.json" --out "$OUT/backbone" --seed 3
cp data/demo-backbone/tokenizer.json "$OUT/backbone/"
"$B" corpus --out "$OUT/corpus.bin" >/dev/null
"$B" calibrate --ckpt "$OUT/backbone" --tokens "$OUT/corpus.bin" --seq-len 64 --threads 2
"$B" checkpoint check "$OUT/backbone"
sed -e "s|backbone_checkpoint: \"data/demo-backbone\"|backbone_checkpoint: \"$OUT/backbone\"|" \
    -e 's|^  attention_choices: SKIP$||' \
    -e 's|stage1_latency_points: 24|stage1_latency_points: 8|' \
    -e 's|stage1_sobol_points: 16|stage1_sobol_points: 6|' \
    -e 's|stage2_trials: 24|stage2_trials: 6|' \
    -e 's|stage2_initial_points: 8|stage2_initial_points: 4|' \
    -e "s|^name: \"demo\"|name: \"$NAME\"|" \
    ${EDITS[@]+"${EDITS[@]}"} \
    configs/demo-campaign.textproto > "$OUT/campaign.textproto"
"$B" demo --config "$OUT/campaign.textproto" --out "$OUT/demo"
