"""``python -m repro.emulator --port N --profile PROFILE [--time-scale K] ...``"""

import sys

from repro.emulator.server import main

if __name__ == "__main__":
    sys.exit(main())
