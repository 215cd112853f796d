"""`python -m ppomq.weightserver ...` is `ppomq weightserver ...`."""

import sys

from ppomq.cli import main

sys.exit(main(["weightserver", *sys.argv[1:]]))
