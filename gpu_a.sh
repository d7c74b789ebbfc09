#!/usr/bin/env bash
set -u
cd "$(dirname "$0")"
( time timeout 90 python3 scripts/bench_kernels.py gemm --quick ) > $OUT/gemm_quick.txt 2>&1
( time timeout 120 python3 scripts/bench_norms.py --kernels softmax,rms_norm,layer_norm --dtypes f32,bf16 --reps 30 ) > $OUT/norms.txt 2>&1
( time timeout 60 python3 scripts/bench_pointwise.py --only silu_mul embedding --reps 30 ) > $OUT/pointwise.txt 2>&1
tail -12 $OUT/gemm_quick.txt; tail -3 $OUT/norms.txt
