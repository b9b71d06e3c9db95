"""Connecting to a fleet: a Ray cluster of boards, or a local Ray instance of twins.

Each board joins the cluster with one "board" slot (`ray start --address HEAD:6379 --resources
'{"board": 1, "module:P3701-0000": 1}'`); the driver places one `BoardWorker` actor on each node
that has a slot (pinned to that node), so a board runs one unit at a time. `connect(twins=N)`
starts a local instance with N slots and N actors, each driving its own twin under its own root
(its own lock, journal and serial "twin-i"), on the loopback interface only. Ray is imported only
on connect (engine.run.fleet.ray_init: how it starts, safely inside the TUI, and stops when it fails).
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Sequence

from engine.core import paths
from engine.core.errors import ConfigError
from engine.core.text import shown
from engine.core.userinput import parse_int
from engine.device.twin.profile import DEFAULT_PROFILE
from engine.run.fleet.model import (BoardActor, BoardInfo, ExperimentEvent, FleetEvent, FleetRunResult,
                                    FleetSweepResult,
                                    SweepPlan)

if TYPE_CHECKING:
    from ray.actor import ActorClass

    from engine.results.store import Store
    from engine.run.experiment import ExperimentSpec
    from engine.run.fleet.board import BoardWorker

log = logging.getLogger(__name__)

BOARD_RESOURCE = "board"
TWIN_RESOURCE_PREFIX = "twin:"  # a node that advertises "twin:<profile>" runs that twin instead of a board
NAMESPACE = "slm-dvfs-fleet"
INFO_TIMEOUT_S = 10.0  # a board that cannot answer its status in this long is shown as unreachable
START_TIMEOUT_S = 180.0  # a board's worker opening its device (imports, the twin's tree)
ACTOR_CONCURRENCY = 4  # info() answers while measure() runs


def module_resource(module: str) -> str:
    """The custom resource a board of `module` advertises, e.g. "module:P3701-0000"."""
    return "module:" + (module.split()[0] if module.strip() else "unknown")


def parse_twins(text: str, default_profile: str = DEFAULT_PROFILE, *, flag: str = "--twins") -> tuple[int, str]:
    """`N[:profile]` -> (N, profile): the one reader of a local fleet's size, for `fleet --twins`,
    the TUI's `--fleet-twins` and its Fleet page's `twins:N` (`flag`, `--twins` or `twins:`, names
    it in the error). N is read strictly (engine.core.userinput); whether the machine has room for
    N twins is checked on connect (engine.run.fleet.ray_init.check_twin_count)."""
    count, _sep, profile = text.partition(":")
    sep = "" if flag.endswith(":") else " "
    given = f"{flag}{sep}{shown(text)}"
    example = f"give e.g. {flag}{sep}3 or {flag}{sep}3:{DEFAULT_PROFILE}"
    try:
        n = parse_int(count, "the number of twins")
    except ConfigError as exc:
        raise ConfigError(f"{flag.rstrip(':')}: {exc.what}", f"{exc.remedy}; {example}") from None
    if n < 1:
        raise ConfigError(f"{given}: need a number of twins of 1 or more", example)
    return n, profile.strip() or default_profile


class Fleet:
    """A connected fleet: its boards' actors, their status, sweeps over them. Use `connect()`."""

    def __init__(self, ray: ModuleType, workers: dict[str, BoardActor], *, owns_ray: bool,
                 twin_root: Path | None = None,
                 temporary: tempfile.TemporaryDirectory[str] | None = None) -> None:
        self.ray = ray
        self._workers = workers  # serial -> actor handle
        self._modules: dict[str, str] = {}
        self._owns_ray = owns_ray
        self.twin_root = twin_root
        self._temporary = temporary
        self._closed = False
        self._lock = threading.Lock()
        self._calls = threading.Lock()  # boards() and close(): Ray is not shut down under a status read

    @property
    def serials(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._workers)

    def actor(self, serial: str) -> BoardActor:
        """The board's actor handle (tests kill it; a caller can ask it for its pid)."""
        with self._lock:
            return self._workers[serial]

    def boards(self) -> tuple[BoardInfo, ...]:
        """Each live board's status now (boards that stopped answering are left out and forgotten)."""
        with self._calls:
            if self._closed:
                raise ConfigError("the fleet is closed", "connect to it again")
            return self._read_boards()

    def _read_boards(self) -> tuple[BoardInfo, ...]:
        with self._lock:
            workers = dict(self._workers)
        refs = {serial: actor.info.remote() for serial, actor in workers.items()}
        ready, _pending = self.ray.wait(list(refs.values()), num_returns=len(refs), timeout=INFO_TIMEOUT_S)
        ready_set = set(ready)
        out = []
        for serial, ref in refs.items():
            if ref not in ready_set:
                log.warning("board %s did not answer within %.0f s", serial, INFO_TIMEOUT_S)
                continue
            try:
                info = self.ray.get(ref)
            except self.ray.exceptions.RayActorError:
                self._forget(serial)
                continue
            self._modules[serial] = info.module
            out.append(info)
        return tuple(out)

    def set_pace(self, pace: float) -> None:
        """Twins: each point also takes its twin time x `pace` in wall time (0: as fast as computed)."""
        with self._lock:
            workers = list(self._workers.values())
        self.ray.get([w.set_pace.remote(pace) for w in workers])

    def sweep(self, plans: Sequence[SweepPlan], *, store: Store, on_event: Callable[[FleetEvent], None] | None = None,
              cancel: threading.Event | None = None) -> FleetSweepResult:
        """Run the plans' sweeps over the fleet, their points shared out among the boards, one share
        per board at a time; see engine.run.fleet.dispatch."""
        from engine.run.fleet.dispatch import FleetSweep
        from engine.run.fleet.loop import board_kind

        if not plans:
            raise ConfigError("a fleet sweep needs at least one model and one task", "give --model and --task")
        boards = {i.serial: (self.actor(i.serial), board_kind(i.module, i.is_twin, i.profile))
                  for i in self._answering()}
        return FleetSweep(self.ray, boards, plans, store=store, on_event=on_event, cancel=cancel,
                          lost=self._forget).run()

    def run(self, specs: Sequence[ExperimentSpec], *, store: Store,
            on_event: Callable[[ExperimentEvent], None] | None = None,
            cancel: threading.Event | None = None) -> FleetRunResult:
        """Run the experiments (ExperimentSpec) over the fleet, each whole on one board (its policy run
        and its MAXN baseline); see engine.run.fleet.runs. Returns a FleetRunResult."""
        from engine.run.fleet.runs import FleetRun

        if not specs:
            raise ConfigError("a fleet run needs at least one experiment", "give --model, --task and --policy")
        boards = {i.serial: (self.actor(i.serial), i) for i in self._answering()}
        return FleetRun(self.ray, boards, specs, store=store, on_event=on_event, cancel=cancel,
                        lost=self._forget).run()

    def _answering(self) -> tuple[BoardInfo, ...]:
        infos = self.boards()
        if not infos:
            raise ConfigError("no board of the fleet answers", "check `slm-dvfs fleet status`; join a board "
                              "(docs/fleet.md) or use --twins N")
        return infos

    def _forget(self, serial: str) -> None:
        with self._lock:
            self._workers.pop(serial, None)

    def close(self) -> None:
        """Close the boards' devices; shut down the local instance this fleet started (or disconnect),
        once a status read in progress (the TUI's poll) has ended."""
        with self._calls:
            if self._closed:
                return
            self._closed = True
            self._close()

    def _close(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        try:
            refs = [w.close.remote() for w in workers]
            self.ray.wait(refs, num_returns=len(refs), timeout=INFO_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - closing is best effort: the instance goes anyway
            log.debug("closing the boards: %s", exc)
        self.ray.shutdown()  # a driver's actors end with its job; a local instance stops with it
        if self._temporary is not None:
            self._temporary.cleanup()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(address: str | None = None, *, twins: int | None = None, profile: str = DEFAULT_PROFILE,
            folder: str | Path | None = None, pace: float = 0.0, thermal: bool = False) -> Fleet:
    """Join the Ray cluster at `address` (or $RAY_ADDRESS) and put a worker on each board, or
    with `twins=N` start a local instance of N twins (under `folder`, else a temporary one).
    `pace` (twins): each point also takes its twin time x pace in wall time, as on a board;
    `thermal` (twins): they run the twin's thermal model (temperatures rise under load, the
    thermal guard acts), as the TUI's own twin does."""
    from engine.run.fleet.ray_init import check_twin_count, import_ray, init_ray

    if twins is not None:
        check_twin_count(twins)  # before Ray starts anything
    ray = import_ray()
    if ray.is_initialized():
        raise ConfigError("this process is already connected to a Ray cluster", "close the other fleet first")
    if twins is not None:
        if address:
            raise ConfigError("--twins starts a local fleet; --address joins a cluster", "give one of them")
        return _local_twins(ray, twins, profile, folder, pace, thermal)
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise ConfigError("no fleet to connect to", "give --address HEAD:6379 (or set RAY_ADDRESS), or try a "
                          "local fleet of twins with --twins 3")
    _probe(address)
    try:
        init_ray(ray, address=address, namespace=NAMESPACE, log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {exc}",
                          "start the head with `ray start --head` and check the address, the firewall "
                          "and the auth token (docs/fleet.md)") from exc
    try:
        return Fleet(ray, _board_actors(ray), owns_ray=False)
    except BaseException:
        ray.shutdown()
        raise


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a HOST:PORT nobody listens on (Ray itself waits minutes for the GCS)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", ray://..., let Ray resolve it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {exc}",
                          "start the head with `ray start --head` and check the address and the firewall "
                          "(docs/fleet.md)") from exc


def _remote_class(ray: ModuleType) -> ActorClass[BoardWorker]:
    from engine.run.fleet.board import BoardWorker

    remote = ray.remote(num_cpus=0, max_concurrency=ACTOR_CONCURRENCY, max_restarts=0)
    cls: ActorClass[BoardWorker] = remote(BoardWorker)
    return cls


def node_worker_args(resources: dict[str, float], node_id: str) -> dict[str, str]:
    """A node's worker arguments: none on a board (it opens the machine's), the twin's profile and
    a serial on a node that advertises one (`"twin:agx-orin-64gb": 1`: it stands in for a board)."""
    names = [k[len(TWIN_RESOURCE_PREFIX):] for k in resources if k.startswith(TWIN_RESOURCE_PREFIX)]
    return {"twin": names[0], "serial": f"twin-{node_id[:8]}"} if names else {}


def _board_actors(ray: ModuleType) -> dict[str, BoardActor]:
    """One worker on each alive node with a board slot, pinned to it: the node's board, or the twin
    it advertises (a machine joined with `"twin:<profile>": 1` to try a cluster before its boards)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(BOARD_RESOURCE, 0) >= 1]
    if not nodes:
        raise ConfigError("the cluster has no boards", "join each board with `ray start --address HEAD:6379 "
                          "--resources '{\"board\": 1, \"module:P3701-0000\": 1}'` (docs/fleet.md)")
    cls = _remote_class(ray)
    actors = {}
    for node in nodes:
        node_id = node["NodeID"]
        name = f"board-{node['NodeManagerAddress']}-{node_id[:8]}"
        where = node_worker_args(node.get("Resources", {}), node_id)
        actors[name] = cls.options(
            name=name, resources={BOARD_RESOURCE: 1},
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(name, **where)
    return _by_serial(ray, actors)


def _local_twins(ray: ModuleType, n: int, profile: str, folder: str | Path | None, pace: float, thermal: bool) -> Fleet:
    from engine.device.twin.profile import load_profile
    from engine.run.fleet.ray_init import init_local

    if n < 1:
        raise ConfigError(f"a fleet of {n} twins", "give --twins 1 or more")
    module = load_profile(profile).identity.module  # an unknown profile fails here, before Ray starts
    # the twins' trees on a memory-backed folder where there is one (engine.core.paths.memory_dir)
    temporary = None if folder is not None else tempfile.TemporaryDirectory(prefix="slm-dvfs-fleet-", dir=paths.memory_dir())
    root = Path(folder if folder is not None else temporary.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    try:
        init_local(ray, num_cpus=max(2, n), resources={BOARD_RESOURCE: n, module_resource(module): n},
                   namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    except BaseException:
        if temporary is not None:
            temporary.cleanup()
        raise
    try:
        cls = _remote_class(ray)
        actors = {}
        for i in range(n):
            name = f"board-twin-{i}"
            actors[name] = cls.options(name=name, resources={BOARD_RESOURCE: 1}).remote(
                name, twin=profile, twin_dir=str(root / f"twin-{i}"), serial=f"twin-{i}", pace=pace, thermal=thermal)
        return Fleet(ray, _by_serial(ray, actors), owns_ray=True, twin_root=root, temporary=temporary)
    except BaseException:
        ray.shutdown()
        if temporary is not None:
            temporary.cleanup()
        raise


def start_error(exc: BaseException) -> str:
    """What stopped a worker's constructor, on one line: Ray keeps only its text (a traceback), whose
    last line is the error (ours end in its remedy: `What to do: ...`)."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[-1].startswith("What to do:") and len(lines) > 1:
        return f"{_ours(lines[-2])}; what to do:{lines[-1][len('What to do:'):]}"
    return lines[-1]


def _ours(line: str) -> str:
    """Our error's text without the qualified type Ray's traceback puts before it (it has a remedy)."""
    return re.sub(r"^engine(\.\w+)*\.\w+Error: ", "", line)


def _by_serial(ray: ModuleType, actors: dict[str, BoardActor]) -> dict[str, BoardActor]:
    """The started actors keyed by their board's serial (waits for them to open their devices)."""
    names = list(actors)
    try:
        infos = ray.get([actors[name].info.remote() for name in names], timeout=START_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError as exc:
        raise ConfigError(f"the boards' workers did not start within {START_TIMEOUT_S:.0f} s",
                          "another fleet driver may hold the boards (one per board): stop it, or check the "
                          "boards' Ray logs") from exc
    except ray.exceptions.RayActorError as exc:  # a worker's constructor failed: its device did not open
        raise ConfigError(f"a board's worker could not start: {start_error(exc)}",
                          "fix what it says on that board (for a twin: its folder on this machine) and connect "
                          "again") from exc
    return {info.serial: actors[name] for name, info in zip(names, infos)}
