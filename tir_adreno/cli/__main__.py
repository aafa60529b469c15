"""``python -m tir_adreno.cli``: the ``tir-adreno`` command."""

import sys

try:
    from tir_adreno.cli import console
except KeyboardInterrupt:  # Ctrl-C while the package imports: the same one line and exit code as later
    print("\ntir-adreno: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(console())
