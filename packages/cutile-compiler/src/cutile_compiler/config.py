"""The compiler's environment variables, and the machinery to declare more.

Each `Knob` is one variable: name, parser, default and a line of documentation,
read at call time with ``KNOB.get()`` (a malformed value raises `ConfigError`
naming the variable). `KNOBS` is every variable the compiler reads, in the
README's order; `knobs_markdown` renders a table of knobs. A layer above declares
its own variables with `Knob` and the parsers `parse_bool`, `choice` and `const`
(`parse_size` reads a size as ``CUTILE_CACHE_MAX_BYTES`` does),
so that every ``CUTILE_*`` variable is read and documented the same way.
"""

from cutile_compiler._config import (
    CACHE,
    CACHE_DIR,
    CACHE_MAX_BYTES,
    CUDA_TOOLKIT_PATH,
    DUMP,
    DUMP_DIR,
    DUMP_STAGES,
    JIT_TIMING,
    KNOBS,
    TILEIRAS,
    TILEIRAS_TIMEOUT,
    ConfigError,
    Knob,
    choice,
    const,
    knobs_markdown,
    parse_bool,
    parse_size,
    variables_read_in,
)

__all__ = [
    "CACHE", "CACHE_DIR", "CACHE_MAX_BYTES", "CUDA_TOOLKIT_PATH", "DUMP", "DUMP_DIR", "DUMP_STAGES", "JIT_TIMING",
    "KNOBS", "TILEIRAS", "TILEIRAS_TIMEOUT", "ConfigError", "Knob", "choice", "const", "knobs_markdown",
    "parse_bool", "parse_size", "variables_read_in",
]
