"""`python -m gradcheck`: the same command as `gradcheck`."""

import sys

from gradcheck.cli import main

sys.exit(main())
