"""`python -m delaylab ...`: the same as the `delaylab` command."""

import sys

from delaylab.cli import main

sys.exit(main())
