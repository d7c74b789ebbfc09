"""Hello world from a kernel: ``print`` inside a kernel, a launch with an explicit grid.

Run: ``python examples/hello_world.py``. The kernel prints one line (on the GPU with
the device's printf, on the interpreter with Python's), and the example checks the
text it printed.
"""

import ctypes
import os
import sys
import tempfile

import cutile
from cutile.core import get_num_tile_blocks, get_tile_block_id

EXPECTED = "Hello, I am tile <0, 0, 0> in a kernel with <1, 1, 1> tiles.\n"


@cutile.entry
def hello() -> None:
    bx, by, bz = get_tile_block_id()
    nx, ny, nz = get_num_tile_blocks()
    print("Hello, I am tile <%d, %d, %d> in a kernel with <%d, %d, %d> tiles.", bx, by, bz, nx, ny, nz)


def run_and_capture() -> str:
    """Runs the kernel with file descriptor 1 sent to a file (the device's printf
    writes there, below Python's sys.stdout), and returns what was printed."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 1)
        try:
            hello().grid(1, 1, 1).sync()  # no Mut tensor decides the grid: it is given
            sys.stdout.flush()
            libc.fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        captured.seek(0)
        return captured.read().decode()


def main() -> int:
    text = run_and_capture()
    sys.stdout.write(text)
    ok = text == EXPECTED
    print(f"hello_world: the kernel printed {'the expected line' if ok else repr(text)} on the "
          f"{cutile.backend()} backend: {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
