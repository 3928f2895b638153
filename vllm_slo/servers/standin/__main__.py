"""``python -m vllm_slo.servers.standin``: see cli."""

import sys

from vllm_slo.servers.standin.cli import main

if __name__ == "__main__":
    sys.exit(main())
