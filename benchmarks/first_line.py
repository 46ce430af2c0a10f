"""Prints one line at once and exits: the start-up benchmark's worker."""

import os

print(f"first line from rank {os.environ.get('RANK', os.environ.get('JAX_RANK', '0'))}", flush=True)
