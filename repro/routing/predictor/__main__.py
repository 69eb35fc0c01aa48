"""``python -m repro.routing.predictor [OUT]``: train the shipped predictor on the training split,
evaluate it on the held-out split and write it to ``OUT`` (default ``data/predictor/``)."""

import sys

from repro.routing.predictor.training import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
