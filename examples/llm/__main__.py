"""``python -m examples.llm``: the same command line as ``python -m examples.llm.generate``."""

import sys

from .generate import main

sys.exit(main())
