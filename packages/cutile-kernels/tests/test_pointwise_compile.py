"""Every kernel behind rope, the element-wise functions, embedding, argmax and
kv_cache_update (one cache, and a K and V pair) compiles with tileiras for sm_90 and
sm_100 at the shapes the benchmarks use (no GPU needed: `cutile.compile` over `api.meta` placeholders)."""

import importlib
from collections.abc import Callable
from typing import Any

import pytest

import cutile
from cutile import api
from cutile.core import bf16, f16, f32, i32, i64

# (the modules, not the functions of the same names that cutile_kernels exports)
activations, argmax, embedding, kv_cache, rope = (
    importlib.import_module(f"cutile_kernels._{name}") for name in ("activations", "argmax", "embedding", "kv_cache",
                                                                    "rope"))

meta = api.meta


def rope_cases() -> dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, Any]]]]:
    cases: dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {}
    for neox in (True, False):
        style = "neox" if neox else "gptj"
        for tabled in (False, True):
            angles = meta([4096, 128], dtype=f32) if tabled else meta([4096], dtype=i64)
            cases[f"rope {style}{' tabled' if tabled else ''}"] = lambda neox=neox, tabled=tabled, angles=angles: (
                rope.rope_kernel(bf16, i64, neox, False, 2, tabled),
                (*rope.partitions(meta([4096, 32, 128], dtype=bf16), meta([4096, 8, 128], dtype=bf16), 2048, neox),
                 meta([4096, 32, 128], dtype=bf16), meta([4096, 8, 128], dtype=bf16), angles, -0.14),
                {"D": 128, "NEOX": neox})
        cases[f"rope in place {style}"] = lambda neox=neox: (
            rope.rope_kernel(f16, i32, neox, True, 1),
            (*rope.partitions(meta([100, 28, 64], dtype=f16), meta([100, 4, 64], dtype=f16), 25, neox),
             meta([100], dtype=i32), -0.2),
            {"D": 64, "NEOX": neox})
    return cases


CASES: dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {
    **rope_cases(),
    "silu_mul flat": lambda: (activations.pointwise_kernel("silu_mul", bf16, "flat", 2),
                              (meta([1 << 20], dtype=bf16).partition([4096]), meta([1 << 20], dtype=bf16),
                               meta([1 << 20], dtype=bf16)), {}),
    "gelu_mul rows": lambda: (activations.pointwise_kernel("gelu_mul", f32, "rows", 2),
                              (meta([100, 300], dtype=f32).partition([8, 256]), meta([100, 300], dtype=f32),
                               meta([100, 300], dtype=f32)), {}),
    "gelu tanh": lambda: (activations.pointwise_kernel("gelu_tanh", f16, "rows", 1),
                          (meta([100, 300], dtype=f16).partition([8, 256]), meta([100, 300], dtype=f16)), {}),
    "add row broadcast": lambda: (activations.pointwise_kernel("add", bf16, "row_broadcast", 1),
                                  (meta([100, 300], dtype=bf16).partition([8, 256]), meta([100, 300], dtype=bf16),
                                   meta([1, 300], dtype=bf16)), {}),
    "embedding": lambda: (embedding.embedding_kernel(bf16, i64, 2),
                          (meta([4096, 4096], dtype=bf16).partition([8, 1024]), meta([151936, 4096], dtype=bf16),
                           meta([4096], dtype=i64)), {}),
    "argmax chunks": lambda: (argmax.argmax_kernels(f32, 2)[0],
                              (meta([8192, 19], dtype=f32).partition([1, 1]),
                               meta([8192, 19], dtype=i32).partition([1, 1]),
                               meta([8192, 151936], dtype=f32)), {"BN": 2048, "SUB": 4}),
    "argmax chunks of keys": lambda: (argmax.argmax_kernels(bf16, 2)[0],
                                      (meta([8192, 5], dtype=f32).partition([1, 1]),
                                       meta([8192, 5], dtype=i32).partition([1, 1]),
                                       meta([8192, 151936], dtype=bf16)), {"BN": 2048, "SUB": 16, "GROUP": 16}),
    "argmax chunks of keys, four groups": lambda: (argmax.argmax_kernels(f16, 1)[0],
                                                   (meta([4, 38], dtype=f32).partition([2, 1]),
                                                    meta([4, 38], dtype=i32).partition([2, 1]),
                                                    meta([4, 151936], dtype=f16)),
                                                   {"BN": 512, "SUB": 8, "GROUP": 2}),
    "argmax one pass": lambda: (argmax.argmax_kernels(f32, 2)[2],
                                (meta([8192], dtype=i64).partition([1]), meta([8192, 3000], dtype=f32)),
                                {"BN": 1024, "GROUP": 1}),  # (f32: plan gives a group of one)
    "argmax one pass of keys": lambda: (argmax.argmax_kernels(bf16, 2)[2],
                                        (meta([64], dtype=i64).partition([1]), meta([64, 151936], dtype=bf16)),
                                        {"BN": 2048, "GROUP": 16}),
    "argmax rows": lambda: (argmax.argmax_kernels(f32, 2)[1],
                            (meta([8192], dtype=i64).partition([128]), meta([8192, 19], dtype=f32),
                             meta([8192, 19], dtype=i32)), {"CP": 32}),
    "kv_cache_update at": lambda: (kv_cache.cache_update_kernel(bf16, None),
                                   (meta([16, 8192, 1024], dtype=bf16).partition([1, 16, 1024])
                                    .map([1, 1, 1], blocks=528),
                                    meta([16, 4096, 1024], dtype=bf16), 5), {}),
    "kv_cache_update positions": lambda: (kv_cache.cache_update_kernel(f16, i64),
                                          (meta([1, 512, 576], dtype=f16).partition([1, 1, 512])
                                           .map([1, 1, 1], blocks=64),
                                           meta([1, 7, 576], dtype=f16), meta([7], dtype=i64)), {}),
    "kv_cache_update pair at": lambda: (kv_cache.cache_update_pair_kernel(bf16, None),
                                        (meta([16, 8192, 1024], dtype=bf16).partition([1, 16, 1024])
                                         .map([1, 1, 1], blocks=528),
                                         meta([16, 8192, 1024], dtype=bf16).partition([1, 16, 1024])
                                         .map([1, 1, 1], blocks=528),
                                         meta([16, 4096, 8, 128], dtype=bf16), meta([16, 4096, 8, 128], dtype=bf16),
                                         5), {"BH": 8}),
    "kv_cache_update heads": lambda: (kv_cache.cache_update_heads_kernel(bf16, i64),
                                      (meta([8, 4096, 1024], dtype=bf16).partition([1, 1, 1024])
                                       .map([1, 1, 1], blocks=264),
                                       meta([8, 1, 8, 128], dtype=bf16), meta([1], dtype=i64)), {"BH": 8}),
    "kv_cache_update pair positions": lambda: (kv_cache.cache_update_pair_kernel(f16, i32),
                                               (meta([1, 512, 640], dtype=f16).partition([1, 1, 256])
                                                .map([1, 1, 1], blocks=64),
                                                meta([1, 512, 640], dtype=f16).partition([1, 1, 256])
                                                .map([1, 1, 1], blocks=64),
                                                meta([1, 1, 10, 64], dtype=f16), meta([1, 1, 10, 64], dtype=f16),
                                                meta([1], dtype=i32)), {"BH": 4}),
}


@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_kernel_compiles(name: str, arch: str) -> None:
    kernel, arguments, constants = CASES[name]()
    compiled = cutile.compile(kernel, *arguments, arch=arch, **constants)
    assert compiled.cubin
