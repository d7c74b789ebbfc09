"""``python -m cutile_ir FILE.tileirbc ...``: prints Tile IR bytecode as MLIR text (as
NVIDIA's ``tileirdisasm`` does), optionally verifying it.

Exit status: 0 every file printed; 1 a file could not be read or is not valid bytecode
(one line on stderr per such file: ``FILE: error: ...``); 2 a usage error (an unknown
flag, no file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from cutile_ir._bytecode_reader import bytecode_version, read_bytecode
from cutile_ir._errors import IRError
from cutile_ir._printer import print_module
from cutile_ir._verifier import verify


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit status 2
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def parser() -> argparse.ArgumentParser:
    """The command line's parser."""
    from cutile_ir import __version__

    top = _Parser(prog="python -m cutile_ir", description="Print Tile IR bytecode files as MLIR text.",
                  allow_abbrev=False)  # a misspelt flag is refused, not guessed
    top.add_argument("files", nargs="+", metavar="FILE", help="a Tile IR bytecode file (.tileirbc)")
    top.add_argument("--verify", action="store_true", help="also run the verifier on each module")
    top.add_argument("--bytecode-version", action="store_true",
                     help="print only each file's bytecode version (FILE: 13.4)")
    top.add_argument("--version", action="version", version=f"cutile_ir {__version__}")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as stop:  # --help, --version, or a usage error (already printed)
        return stop.code if isinstance(stop.code, int) else 2
    status = 0
    for path in args.files:
        try:
            with open(path, "rb") as file:
                data = file.read()
            if args.bytecode_version:
                print(f"{path}: {bytecode_version(data)}")
                continue
            module = read_bytecode(data)
            if args.verify:
                verify(module)
            sys.stdout.write(print_module(module))
        except (IRError, OSError) as exc:
            print(f"{path}: error: {' '.join(str(exc).split())}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
