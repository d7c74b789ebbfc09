#!/usr/bin/env bash
# Builds and runs raw_launch.c (needs nvcc, gcc and a GPU): µs per cuLaunchKernel from C.
set -euo pipefail
cd "$(dirname "$0")"
cuda=${CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d)
"$cuda/bin/nvcc" -cubin -arch=sm_90 add_kernel.cu -o "$work/add.cubin"
gcc -O2 raw_launch.c -I"$cuda/include" -lcuda -o "$work/raw_launch"
"$work/raw_launch" "$work/add.cubin"
