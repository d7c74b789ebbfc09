"""cutile-kernels' tests run the kernels on the CPU interpreter (GPU tests are marked
``gpu``); `cutile_kernels_testkit` holds their shared inputs, references and checks."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # for cutile_kernels_testkit
