"""``python -m pagedkit.sim``: the same as ``python -m pagedkit simulate``."""

import sys

from .cli import main

sys.exit(main())
