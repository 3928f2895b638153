"""`python -m vllm_slo ...` is `vllm-slo ...`."""

import sys

from vllm_slo.cli import main

sys.exit(main())
