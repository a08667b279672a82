"""Devices: which ones to use, a mesh over them, and one XLA CPU device per core.

The oracle splits a batch of trees evenly over devices along one mesh axis,
``"trees"`` (docs/scaling.md); every device runs the same program on its
share, so the trees are those of one device.
"""

from __future__ import annotations

import os
from functools import cache

import jax
import jaxlib
import numpy as np
from jax._src import xla_bridge
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .errors import BrwsimError

TREES_AXIS = "trees"
YNN_JAXLIB = (0, 10)  # the first jaxlib checked to have the YNNPACK fusion flag (0.10.2)


def one_cpu_device_per_core() -> None:
    """Let XLA's CPU backend expose one device per core; call before JAX's backend starts.

    XLA runs one CPU computation on one core; with a device per core the
    oracle's batch of trees is sharded over all of them (identical results,
    about 1.8x faster on 2 cores: benchmarks/README.md). XLA reads the flag
    when the backend starts (the first ``jax.devices()``), not at ``import
    jax``, so importing brwsim first is fine. An explicit device count in
    ``XLA_FLAGS`` is left as it is. The ``brwsim`` command calls this first.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" in flags:
        return
    n = os.cpu_count() or 1
    if n > 1:
        os.environ["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={n}").strip()


# XLA's CPU compiler hands some fusions (a log-sum-exp's reduce with its log, above a size) to YNNPACK, whose
# exp/log round differently from XLA's own: without this flag a tree's values would depend on the batch's shape
# (measured: 240 of 1000 trees' log-probs differ in the last bit between batches of 1000 and 4096 trees).
SHAPE_INDEPENDENT_FLAG = "--xla_cpu_experimental_ynn_fusion_type="


def _backend_started() -> bool:
    try:
        return bool(xla_bridge.backends_are_initialized())
    except AttributeError:  # another JAX: assume it has started (the flag would be ignored anyway)
        return True


def shape_independent_numerics() -> bool:
    """Make every XLA CPU computation round the same way whatever the shape of its batch; call before JAX's
    backend starts (importing brwsim does). True if the flag is in force.

    XLA's CPU compiler moves some fusions to the YNNPACK library depending on
    their size, and YNNPACK's exp and log differ from XLA's own in the last
    bit: a tree's value then depends on how many trees share its batch (and
    so on ``--batch``, the device and process counts). With YNNPACK fusions
    off (XLA flag ``--xla_cpu_experimental_ynn_fusion_type=``, added to
    ``XLA_FLAGS`` unless it names a YNNPACK setting already) every tree is
    computed by the same code whatever the batch. Other backends ignore the flag.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "ynn_fusion_type" in flags:
        return SHAPE_INDEPENDENT_FLAG in flags.split()
    if _backend_started() or not _knows_ynn():
        return False
    os.environ["XLA_FLAGS"] = (flags + " " + SHAPE_INDEPENDENT_FLAG).strip()
    return True


def _knows_ynn() -> bool:
    """This jaxlib has YNNPACK fusions (an unknown flag in XLA_FLAGS would stop the process)."""
    try:
        return tuple(int(x) for x in jaxlib.__version__.split(".")[:2]) >= YNN_JAXLIB
    except ValueError:
        return False


def default_devices():
    """``"all"`` when the default backend is the CPU with several devices (one per core), else None.

    A plain ``import jax`` has one CPU device; accelerators are used one at a
    time unless ``devices`` says more.
    """
    if jax.default_backend() == "cpu" and jax.local_device_count() > 1:
        return "all"
    return None


def resolve_devices(spec=None) -> list | None:
    """Devices to shard over: None (the default device), ``"all"``, a count, or a list of devices."""
    if spec is None:
        return None
    avail = jax.local_devices()
    if isinstance(spec, str):
        if spec.strip().lower() == "all":
            return list(avail)
        try:
            spec = int(spec)
        except ValueError:
            raise BrwsimError(f"devices must be 'all' or a positive integer, got {spec!r}") from None
    if isinstance(spec, int) and not isinstance(spec, bool):
        if not 1 <= spec <= len(avail):
            raise BrwsimError(f"devices must be between 1 and {len(avail)} (devices available), got {spec}")
        return list(avail[:spec])
    try:
        devs = list(spec)
    except TypeError:
        raise BrwsimError(f"devices must be 'all', a positive integer or a list of devices, got {spec!r}") from None
    if not devs:
        raise BrwsimError("devices: the list of devices is empty")
    return devs


def available_memory(devices=None) -> int | None:
    """Bytes a computation can still use: the smallest free memory of the accelerators in ``devices``
    (``memory_stats``), or the host's available memory (``MemAvailable``) for the CPU; None if unknown."""
    devs = devices or jax.local_devices()[:1]
    free = []
    for d in devs:
        stats = d.memory_stats() if d.platform != "cpu" else None
        if stats and "bytes_limit" in stats:
            free.append(int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))
    if free:
        return min(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@cache
def mesh(devices: tuple) -> Mesh:
    """A one-axis mesh (``"trees"``) over these devices."""
    return Mesh(np.array(devices), (TREES_AXIS,))


def split_over(devices: tuple, axis: int = 0) -> NamedSharding:
    """The sharding that splits an array's ``axis`` evenly over ``devices``."""
    return NamedSharding(mesh(devices), PartitionSpec(*([None] * axis), TREES_AXIS))


def place_batch(devices: tuple, x):
    """``x`` split along its first axis over ``devices`` (its length must be a multiple of their number)."""
    n = len(devices)
    if x.shape[0] % n:
        raise BrwsimError(f"a batch of {x.shape[0]} trees does not split evenly over {n} devices")
    return jax.device_put(x, split_over(devices))


shape_independent_numerics()  # at import, before anything can start the backend: the API gets it too
