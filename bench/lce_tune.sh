#!/usr/bin/env bash
# lce_tune.sh DB OUT: tunes the linear cross-entropy's chunk (the kind
# linear_cross_entropy: the whole loss block, GEMMs and the fused
# cross-entropy kernel, forward and backward, timed at each chunk its
# memory budget allows) for the 8B-scale key (8192 tokens, hidden 4096,
# vocabulary 128256) and the 1B training step's (4096 tokens, hidden 2048),
# bf16, at the Python call's default budget (256 MiB of chunk logits) and
# at 4 GiB, and at Liger's chunk's memory (its chunk rows x the
# vocabulary: 62 MiB at 8B, 31 MiB at 1B), where above the budget's whole
# rows the chunks are made in vocabulary blocks, into the store DB; then
# prints the stored winners. Run from the repository root after a build
# (bench/gpu-session.sh cross-entropy, step lce-tune). LCE_TUNE_TIME:
# seconds a tune (default 40); LCE_TUNE_SPECS: the keys (SHAPE:PARAMS,
# space-separated) instead of those.
set -u
db=${1:?DB}
out=${2:?OUT}
for spec in ${LCE_TUNE_SPECS:-8192x128256:hidden=4096 8192x128256:hidden=4096,budget=4096 \
        8192x128256:hidden=4096,budget=62 \
        4096x128256:hidden=2048 4096x128256:hidden=2048,budget=4096 \
        4096x128256:hidden=2048,budget=31}; do
    timeout 120 build/tuned tune --kernel linear_cross_entropy --shape "$spec" --dtype bf16 \
        --exhaustive --time "${LCE_TUNE_TIME:-40}" --db "$db" --json \
        >>"$out/lce_tunes.jsonl" 2>>"$out/lce_tunes.log"
    echo "lce-tune $spec: exit $?"
done
echo "stored winners (config chunkN: rows a chunk; chunkN.vS: in S vocabulary blocks):"
build/tuned list --db "$db" 2>&1 | grep linear_cross_entropy
# the store's records, for a later call's import step (CE_RECORDS)
build/tuned export --db "$db" >"$out/lce-records.jsonl" 2>>"$out/lce_tunes.log"
