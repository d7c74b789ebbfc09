"""Pure-Python CUDA Tile IR: types, ops, builder, verifier, printer, bytecode writer and reader.

Not built yet: filled by the issue "cutile-ir: the whole of Tile IR in pure Python".
"""

__all__: list[str] = []
