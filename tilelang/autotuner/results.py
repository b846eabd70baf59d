"""The tuning-result cache: a second process gets the best configuration without re-benchmarking.

One JSON file per tuning problem under `<TILELANG_CACHE_DIR>/autotuner/`. The key covers what
decides the winner: the kernel's own cache key without the tuned arguments (factory source and
closure, call arguments (tensors by dtype, shape and strides), out_idx, target, pass configs,
compiler versions; see tilelang/cache.py), the configuration list, how candidates are checked and
timed (reference and supply functions by name and source; the inputs of `set_autotune_inputs` by
dtype and shape, not values), and the GPU's name (an H100 and an H200 share sm_90a but not their
best tiles). A record holds the index of the winner in the
configuration list, so configurations need not be JSON-serializable; their repr is kept beside it
for people reading the file and as a consistency check.

Disabled with TILELANG_AUTO_TUNING_DISABLE_CACHE=1 (public TileLang's switch).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid

from tilelang import cache, env

logger = logging.getLogger("tilelang")


def enabled() -> bool:
    return not env.autotune_cache_disabled()


def folder() -> str:
    return os.path.join(env.cache_dir(), "autotuner")


def device_name() -> str:
    """The GPU the candidates are timed on, or "no-gpu"."""
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
    except ImportError:
        return "no-gpu"


def key_for(jit, args, kwargs, target, configs, settings) -> str | None:
    """The cache key of one tuning problem (hex sha256), or None when the factory has no source
    file to hash (an interactive session): then nothing is cached."""
    try:
        flags = getattr(jit, "compile_flags", None) or ()
        kernel = cache.key_for(jit.factory, args, kwargs, jit.out_idx, target, jit.pass_configs, flags)
    except (OSError, TypeError):
        return None
    parts = {"kernel": kernel, "configs": repr(configs), "settings": repr(settings), "device": device_name()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def load(key: str, configs) -> dict | None:
    """The record stored under `key`, or None on a miss or an unreadable or inconsistent record."""
    path = os.path.join(folder(), f"{key}.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        index = record["config_index"]
        if not 0 <= index < len(configs) or repr(configs[index]) != record["config"]:
            raise ValueError("its configuration does not match the configuration list")
        return record
    except (OSError, ValueError, KeyError, TypeError) as err:
        logger.warning("tilelang: ignoring tuning record %s (%s)", path, err)
        return None


def store(key: str, record: dict) -> None:
    """Write `record` under `key` atomically (a reader sees a whole file or none)."""
    os.makedirs(folder(), exist_ok=True)
    final = os.path.join(folder(), f"{key}.json")
    tmp = os.path.join(folder(), f".tmp-{uuid.uuid4().hex}.json")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
