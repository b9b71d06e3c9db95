#!/bin/bash
# How results_v11.sqlite and expected.json were made: with the code of main at 4f4911d (issue 20's end),
#   tests/data/golden_store/make.sh CHECKOUT PYTHON
# e.g. make.sh /work/wt/golden-before /work/main/.venv/bin/python. Everything runs on the twin in a fresh
# temporary state, data and cache folder; the store is then vacuumed and read back by capture.py (what that
# code finds in it: every run's baseline, the oracle's points, the comparisons, the selector's datasets).
set -ex
CODE=$(cd "$1" && pwd); PY=$2; HERE=$(cd "$(dirname "$0")" && pwd); TMP=$(mktemp -d)
export PYTHONPATH=$CODE SLM_DVFS_STATE_DIR=$TMP/state SLM_DVFS_DATA_DIR=$TMP/data SLM_DVFS_CACHE_DIR=$TMP/cache
export HF_HUB_OFFLINE=1; unset SLM_DVFS_DB
E="$PY -m engine"; T="--twin agx-orin-64gb"; W="--model bert-tiny --task sst2"
mkdir -p "$TMP/my-bert" && cp "$HERE/my-bert-config.json" "$TMP/my-bert/config.json"  # bert-small's architecture
$E sweep --fast $W $T
$E sweep --fast $W $T --pad max
$E sweep --fast $W $T --space gpu+emc
$E sweep --fast --model bert-mini --task mnli $T --mode lora --lora-rank 4
$E sweep --fast --model bert-mini --task mnli $T --grad-checkpointing --precision fp16
$E run $T --simulate $W --policy static:gpu=612 --compare maxn --steps 20
$E run $T --simulate $W --policy oracle --compare maxn --steps 20
$E run $T --simulate $W --policy oracle --compare maxn --steps 20 --pad max
$E run $T --simulate $W --policy static:gpu=816 --compare maxn --steps 20 --reuse-baseline
$E run $T --simulate --model bert-mini --task mnli --mode lora --lora-rank 4 --policy oracle --compare maxn --steps 10
$E run $T --simulate --model bert-mini --task mnli --grad-checkpointing --precision fp16 --policy oracle --compare maxn --steps 10
$E run $T $W --policy static:gpu=816 --compare maxn --steps 3 --batch-size 4 --max-seq-len 16 --train-samples 16 --eval-samples 8
$E run $T --simulate $W --policy online --objective energy@5% --compare maxn --steps 30
$E import-sweep "$HERE/measured.csv" --model "$TMP/my-bert/config.json"
$E import-sweep "$HERE/measured-board2.csv" --model bert-small --board lab-orin-1 --serial 1421
$E fleet run --twins 1 $W --policy static:gpu=714 oracle --simulate --steps 10
$E fleet sweep --twins 1 --model bert-mini --task sst2 --batch-size 8 --fast
$E sweep $T $W --batch-size 4 --max-seq-len 16 --train-samples 16 --eval-samples 8 --steps 2 --warmup-steps 1 --repeats 1
$PY "$HERE/cancelled.py"  # a sweep cancelled after 4 of its points: resumable
cp "$TMP/data/results.sqlite" "$HERE/results_v11.sqlite"
sqlite3 "$HERE/results_v11.sqlite" "PRAGMA journal_mode=DELETE; VACUUM;"
cp "$HERE/results_v11.sqlite" "$TMP/copy.sqlite"
$PY "$HERE/capture.py" "$TMP/copy.sqlite" "$HERE/expected.json"
rm -rf "$TMP"
