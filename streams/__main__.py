"""``python -m streams``: the osprey command line."""

import sys

from streams.cli import main

sys.exit(main())
