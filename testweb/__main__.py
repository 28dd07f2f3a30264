"""``python -m testweb``: serve the synthetic web until Ctrl-C."""
import sys

from testweb.cli import main

sys.exit(main())
