"""``python -m gateway`` is ``herald``."""

import sys

from gateway.cli import main

sys.exit(main())
