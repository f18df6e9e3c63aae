"""Run as `python -m trainpkg.train [LAST_STEP]`."""

import sys

from trainpkg.data import train

train(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
