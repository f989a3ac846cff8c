"""``python -m marljoint``: the ``marljoint`` command (:func:`marljoint.cli.main`)."""

import sys

from marljoint.cli import main

if __name__ == "__main__":
    sys.exit(main())
