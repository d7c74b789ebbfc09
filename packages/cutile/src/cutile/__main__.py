"""``python -m cutile``: the ``cutile`` command (`cutile._cli`)."""

from cutile._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
