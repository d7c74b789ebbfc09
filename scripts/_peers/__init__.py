"""Benchmark peers for scripts/bench_kernels.py: kernels written with other libraries
(Triton, NVIDIA's cuTile Python) to measure cutile_kernels against. They are benchmark
peers only, never part of the packages; each module imports its library at import."""
