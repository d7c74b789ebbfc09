"""The cutile kernel compiler: Python kernel -> typed kernel IR -> Tile IR -> cubin.

It captures a kernel's Python source, resolves and types it, lowers it to cutile_ir, writes bytecode and runs NVIDIA's tileiras for a given arch string (it knows no driver).

Not built yet: this package holds only its skeleton until the issue
"cutile-compiler: the Python tile-kernel language, lowered to Tile IR and compiled to cubin" fills it. It deliberately exports nothing, so that no code can come
to depend on a placeholder API.
"""

__all__: list[str] = []
