"""``python -m tir_adreno.cli``: the ``tir-adreno`` command."""

import sys

from tir_adreno.cli import main

sys.exit(main())
