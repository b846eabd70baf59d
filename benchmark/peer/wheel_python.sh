#!/usr/bin/env bash
# A Python 3.12 on this (CPU) machine that imports the public TileLang 0.1.15 wheel, to read the CUDA it
# generates for a public example beside ours (facts for a comparison; never copy its code into the
# project). Needs pyenv's 3.12 and .gpu/peer/anchor.tar.xz (../shared/peer/README.md). Prints the
# command prefix; then, from an example's folder:
#   TILELANG_DEFAULT_TARGET='{"kind": "cuda", "arch": "sm_90a"}' PYTHONPATH=/tmp/anchor:. /tmp/py312/bin/python gen.py
# where gen.py patches `torch.cuda.get_device_capability = lambda *a: (9, 0)` (torch here is a CPU
# build: pass CPU tensors) and calls the example's factory `.compile(...)`, then `.get_kernel_source()`.
set -eu
py=$(ls -d /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)
[ -n "$py" ] || { echo "no Python 3.12 under pyenv"; exit 2; }
[ -x /tmp/py312/bin/python ] || { "$py" -m venv /tmp/py312 && /tmp/py312/bin/pip install -q torch==2.13.0 numpy cloudpickle \
  tqdm typing_extensions psutil ml_dtypes; }
[ -d /tmp/anchor ] || tar -C /tmp -xJf .gpu/peer/anchor.tar.xz
(cd /tmp && PYTHONPATH=/tmp/anchor /tmp/py312/bin/python -c 'import tilelang; print("wheel", tilelang.__version__)')
echo "TILELANG_DEFAULT_TARGET='{\"kind\": \"cuda\", \"arch\": \"sm_90a\"}' PYTHONPATH=/tmp/anchor:. /tmp/py312/bin/python"
