"""``python -m cutile_ir FILE.tileirbc``: print Tile IR bytecode as MLIR text (like tileirdisasm).

Options: ``--verify`` also runs the verifier; ``--version`` prints only the file's version.
"""

from __future__ import annotations

import sys

from ._bytecode_reader import bytecode_version, read_bytecode
from ._errors import IRError
from ._printer import print_module
from ._verifier import verify


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    flags = {a for a in args if a.startswith("--")}
    files = [a for a in args if not a.startswith("--")]
    rc = 0
    for path in files:
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            if "--version" in flags:
                print(f"{path}: {bytecode_version(data)}")
                continue
            m = read_bytecode(data)
            if "--verify" in flags:
                verify(m)
            sys.stdout.write(print_module(m))
        except IRError as e:
            print(f"{path}: error: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
