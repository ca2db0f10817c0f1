"""``python -m workbench`` (and ``torchrun -m workbench``): the command line."""

import sys

from workbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
