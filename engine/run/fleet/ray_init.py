"""Starting Ray in this process: importing it, joining a cluster or starting a local instance of
twins, and what each start must guarantee wherever it runs.

- Inside the TUI: Textual replaces sys.stdout/stderr with objects that have no file descriptor, and
  ray.init enables faulthandler on sys.stderr (unless it is on), which then fails after Ray's
  processes have started. faulthandler is enabled first, on the process's real stderr.
- A failed start stops what it started (ray.shutdown): no Ray processes are left behind.
- A local instance of twins listens on the loopback interface only (its GCS, raylet, workers and
  the driver), and is refused where the Ray installed would listen on every interface.
- Its size is capped by this machine's cores and memory, before anything starts.
- Ray's own log lines in this process (its token notice, "Started a local Ray instance") say
  `ray:` and follow this program's log level (ray.init's logging options), and the cluster's
  error messages that Ray's driver prints on stdout (`(raylet) A worker died ...`), among this
  program's output and into its --json, go to the same `ray` logger instead.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TextIO

from engine.core.errors import ConfigError
from engine.core.optional import import_optional

log = logging.getLogger(__name__)
ray_log = logging.getLogger("ray.fleet")  # a child of Ray's logger: its handler, its `ray:` label, its level

LOOPBACK = ("127.0.0.1", "::1", "localhost")
TWINS_PER_CORE = 4  # a twin's worker mostly waits (paced points, the driver); one that trains shares its core
# Measured on this project's twins (USS): a twin's worker takes ~65 MB idle or in fast mode and ~0.6 GB
# fine-tuning bert-mini; Ray's own processes (GCS, raylet, agents) ~0.3 GB. A twin is given 0.7 GiB.
TWIN_MEMORY_BYTES = int(0.7 * 2**30)
RAY_MEMORY_BYTES = int(0.5 * 2**30)
RAY_LOG_FORMAT = "%(levelname)s ray: %(message)s"


def import_ray() -> ModuleType:
    ray = import_optional("ray", "the fleet", "pip install -e '.[fleet]' (installs ray), on the driver and "
                          "on every board")
    _route_ray_prints(ray)
    return ray


# --------------------------------------------------------------------------- the machine's room
@dataclass(frozen=True)
class TwinRoom:
    """How many twins this machine can run: by its cores and by its memory available now."""

    cores: int
    available_bytes: int | None  # None where the system does not say

    @property
    def by_cores(self) -> int:
        return self.cores * TWINS_PER_CORE

    @property
    def by_memory(self) -> int | None:
        if self.available_bytes is None:
            return None
        return max(0, (self.available_bytes - RAY_MEMORY_BYTES) // TWIN_MEMORY_BYTES)

    @property
    def most(self) -> int:
        return min(self.by_cores, self.by_memory) if self.by_memory is not None else self.by_cores


def twin_room() -> TwinRoom:
    try:
        cores = len(os.sched_getaffinity(0))  # the cores this process may run on (a container's share)
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return TwinRoom(max(1, cores), _available_memory())


def _available_memory() -> int | None:
    """MemAvailable (what can be used without swapping), else the free pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_twin_count(n: int, room: TwinRoom | None = None) -> None:
    """Refuse a fleet of more twins than this machine has room for (each is a process and a tree)."""
    room = room or twin_room()
    if n <= room.most:
        return
    memory = ("" if room.available_bytes is None else
              f", {room.available_bytes / 2**30:.1f} GiB available at {TWIN_MEMORY_BYTES / 2**30:.1f} GiB a twin "
              f"(room for {room.by_memory})")
    raise ConfigError(f"--twins {n}: this machine has room for {room.most} twin(s) ({room.cores} core(s) x "
                      f"{TWINS_PER_CORE} = {room.by_cores}{memory})",
                      f"give --twins {room.most} or fewer (each twin is a worker process with its own tree); "
                      "join more machines to a cluster for a larger fleet (docs/fleet.md)"
                      if room.most >= 1 else "free some memory, or join boards to a cluster (docs/fleet.md)")


# --------------------------------------------------------------------------- starting Ray
def init_ray(ray: ModuleType, **options: object) -> None:
    """ray.init(**options), safe inside a TUI; stopped again when it fails part-way. Ray's log lines
    here say `ray:` (not Ray's own timestamped format, as if they were ours) at this program's level."""
    _fault_handler_on_real_stderr()
    options.setdefault("logging_level", logging.getLogger().getEffectiveLevel())
    options.setdefault("logging_format", RAY_LOG_FORMAT)
    try:
        ray.init(**options)
    except BaseException:
        ray.shutdown()  # the GCS and raylet may have started before the failure
        raise


def init_local(ray: ModuleType, **options: object) -> None:
    """A new local Ray instance (a fleet of twins) listening on the loopback interface only: its
    own, never an instance already running on the machine (`ray start`, another session's fleet,
    $RAY_ADDRESS), which `ray.init()` without an address would join (Ray's docs: address "local"
    starts a new instance "even if there is already an existing local Ray instance").

    Ray binds its servers to every interface unless the node's address is the loopback one, which
    it picks only where it does not run clusters (its RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER switch,
    read into ray_constants at import): that switch is off while this instance starts, and put
    back after (a later connection to a cluster needs the machine's own address)."""
    constants = _ray_constants()
    before = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if before is not None:
        setattr(constants, "ENABLE_RAY_CLUSTER", False)
    try:
        init_ray(ray, address="local", **options)
    finally:
        if before is not None:
            setattr(constants, "ENABLE_RAY_CLUSTER", before)
    node_ip = ray.util.get_node_ip_address()
    if node_ip not in LOOPBACK:
        ray.shutdown()
        raise ConfigError(f"this Ray ({ray.__version__}) would start the local fleet on {node_ip}, reachable "
                          "from the network, not on the loopback interface only",
                          "install the Ray version of the fleet extra (pip install -e '.[fleet]'), or start a "
                          "head bound to your own network (docs/fleet.md) and join it with --address")


def _ray_constants() -> ModuleType | None:
    try:
        from ray._private import ray_constants
    except ImportError:  # another Ray layout: init_local's check still refuses a non-loopback start
        return None
    return ray_constants


def _fault_handler_on_real_stderr() -> None:
    """Ray enables faulthandler on sys.stderr, which a Textual app replaces with an object whose
    fileno() is not a descriptor: enable it first on the process's own stderr."""
    if faulthandler.is_enabled():
        return
    stream = _real_stderr()
    if stream is not None:
        faulthandler.enable(file=stream, all_threads=False)


def _real_stderr() -> TextIO | None:
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None and stream.fileno() >= 0:
                return stream
        except (AttributeError, OSError, ValueError):
            continue
    return None


def _route_ray_prints(ray: ModuleType) -> None:
    """Ray's driver prints the cluster's error messages (a board's worker killed: `(raylet) A worker
    died or was killed ...`) with print_to_stdstream, on stdout: they go to the `ray` logger instead
    (a lost board is this program's own event too). Ray looks the function up when it prints."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is None or getattr(getattr(worker, "print_to_stdstream", None), "routed", False):
        return

    def to_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:  # Ray's message, as it prints it
        who = f"({data['pid']}) " if data.get("pid") else ""
        for line in data.get("lines", ()):
            ray_log.warning("%s%s", who, line)

    to_log.routed = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_log
