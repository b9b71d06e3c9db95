"""A board's worker: what runs on each board of the fleet (one Ray actor per board).

It opens its device once (a board at its sysfs root, or its own twin under its own root, so
each twin has its own lock, journal and serial), answers `info()` at any time (the actor runs
several methods at once: a snapshot read while a sweep runs), and measures a sweep's points
through the same harness, clock guard and thermal guard as a local sweep (`measure_points`),
handing each point back as it is done instead of writing a store: the driver is the writer.
The worker is the client of its process: it builds the policy factory (`ml` included) once and
hands it to each experiment it runs, as the CLI and the TUI do.

This module does not import Ray: `cluster` wraps the class in an actor.
"""

from __future__ import annotations

import logging
import os
import queue
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence, TypeVar, Union

from engine.device.rails import total_of
from engine.core.errors import one_line
from engine.core.measurement import Measurement
from engine.device.setting import DvfsSetting
from engine.results.records import DeviceRecord
from engine.run.fleet.model import BoardInfo, StreamEnd, StreamedPoint, UnitPlan
from engine.run.harness import open_harness
from engine.run.sweep import SweepSpec, measure_points, sweep_settings
from engine.workload.training.loop import TrainControl
from engine.workload.resolve import Workload, resolve_workload
from engine.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from engine.run.experiment import ExperimentSpec
    from engine.run.fleet.model import ExperimentPlan, ExperimentRecords, RunProgress, SelectorFiles
    from engine.results.store.sweep_tables import FinishedSweep

log = logging.getLogger(__name__)

END = "end"  # the last item of a measure stream: (END, status, error)
RESOLVED_KEPT = 16  # workloads a board keeps resolved (a fleet's sweeps and experiments, in turn)

# What a board's experiment streams: progress, then its records, then the END.
BoardItem = Union["RunProgress", "ExperimentRecords", StreamEnd]
Item = TypeVar("Item")


def board_serial(root: str | Path) -> str:
    """The board's device-tree serial ('' where it has none)."""
    try:
        raw = (Path(root) / "proc/device-tree/serial-number").read_bytes()
    except OSError:
        return ""
    return raw.strip(b"\0\n ").decode(errors="replace")


class BoardWorker:
    """One board (or one twin) and the sweep it runs; see the module's docstring."""

    def __init__(self, name: str, *, twin: str | None = None, twin_dir: str | None = None, serial: str | None = None,
                 sysfs_root: str | None = None, pace: float = 0.0, thermal: bool = False) -> None:
        from engine.device.session import open_device

        self.name = name
        if twin and twin_dir is None:  # a cluster node's twin: its own tree on that machine, not the user's twin
            twin_dir = str(Path(tempfile.gettempdir()) / "slm-dvfs-fleet" / name)
        self.pace = pace  # twins: sleep each point's twin time x pace, so a point takes wall time as on a board
        # a twin gets the fleet's serial in its device tree, so its results name it as a board's do
        self.session = open_device(twin=twin, sysfs_root=sysfs_root, realtime=False, thermal=thermal,
                                   twin_dir=Path(twin_dir) if twin_dir else None,
                                   twin_serial=serial if twin else None)
        ident = self.session.device.identity()
        self.identity = ident
        root = twin_dir or sysfs_root or "/"
        self.serial = serial or board_serial(root) or f"{os.uname().nodename}:{root}"
        self._lock = threading.Lock()
        self._running = ""
        self._control: TrainControl | None = None
        self._stop = threading.Event()
        self._resolved: dict[WorkloadSpec, Workload] = {}  # the workloads of its sweeps' shares and experiments
        from engine.selector import policy_factory

        self.policies = policy_factory()  # every policy an experiment here may ask for, `ml` included

    # ------------------------------------------------------------------ cheap, any time
    def pid(self) -> int:
        return os.getpid()

    def info(self) -> BoardInfo:
        device = self.session.device
        try:
            temps = {t.zone: t.celsius for t in device.temperatures()}
        except Exception as exc:  # noqa: BLE001 - a status read must not fail the fleet's view
            log.debug("temperatures of %s: %s", self.name, exc)
            temps = {}
        try:
            power: float | None = total_of({r.name: r.power_mw for r in device.rails()}) / 1000.0
        except Exception as exc:  # noqa: BLE001
            log.debug("rails of %s: %s", self.name, exc)
            power = None
        with self._lock:
            running = self._running
        import platform

        return BoardInfo(name=self.name, serial=self.serial, module=self.identity.module, l4t=self.identity.l4t,
                         profile=self.identity.profile, is_twin=self.identity.is_twin, temps_c=temps, power_w=power,
                         busy=bool(running), running=running, node=platform.node())

    def cancel(self) -> None:
        """Stop the running sweep at its next step boundary; its clock guard restores the clocks."""
        with self._lock:
            control, stop = self._control, self._stop
        if control is not None:
            control.cancel("the fleet's driver cancelled")
            stop.set()

    # ------------------------------------------------------------------ one workload's sweep
    def device_record(self) -> DeviceRecord:
        """What the store records for this board."""
        return DeviceRecord.from_identity(self.identity)

    def prepare(self, spec: SweepSpec) -> UnitPlan:
        """The records the driver stores for this workload on this board, and its settings."""
        from engine.results.records import WorkloadRecord

        spec = self.board_spec(spec)
        workload = self.workload_of(spec.workload)
        settings = sweep_settings(spec, self.session.device)
        return UnitPlan(DeviceRecord.from_identity(self.identity),
                        WorkloadRecord.from_workload(workload, spec.workload.data),
                        settings, self.identity.source, spec.space_key(spec.rails))

    def set_pace(self, pace: float) -> None:
        self.pace = pace

    def workload_of(self, spec: WorkloadSpec) -> Workload:
        """The workload, resolved once per WorkloadSpec (tracing is the slow part): a board measures
        shares of several sweeps in turn, and experiments of several policies on one workload."""
        with self._lock:
            if spec in self._resolved:
                return self._resolved[spec]
        workload = resolve_workload(spec, mem_total_bytes=self.session.memory_total_bytes())  # this board's memory
        with self._lock:
            if len(self._resolved) >= RESOLVED_KEPT:
                self._resolved.pop(next(iter(self._resolved)))
            self._resolved[spec] = workload
        return workload

    def board_spec(self, spec: SweepSpec) -> SweepSpec:
        """The plan on this board: its device (its twin's profile, or none on a board), checked."""
        spec = replace(spec, twin=self.session.profile_name, sysfs_root=None)
        spec.validate()
        return spec

    def measure(self, spec: SweepSpec,
                plan: Sequence[tuple[DvfsSetting, int]]) -> Iterator[Union[StreamedPoint, StreamEnd]]:
        """Measure the planned points, yielding a StreamedPoint for each as it is done, then
        (END, status, error). Runs the harness in a thread so that points stream while it runs."""
        spec = self.board_spec(spec)
        out: queue.Queue[Union[StreamedPoint, StreamEnd]] = queue.Queue()
        control = TrainControl()
        stop = threading.Event()
        label = f"{spec.workload.model}/{spec.workload.task}"

        def record(setting: DvfsSetting, repeat: int, m: Measurement, rail_j: Mapping[str, float], i: int) -> None:
            # a point measured here has its time (only an imported sweep's may lack one)
            assert m.time_s is not None
            if self.pace > 0:
                stop.wait(m.time_s * self.pace)  # paced twin: the point's time, in wall time
            with self._lock:
                self._running = f"{label} {i}/{len(plan)}"
            out.put(StreamedPoint(setting, repeat, m.time_s, m.energy_j, m.samples, dict(rail_j), m.avg_power_w,
                                  m.peak_power_w))

        def work() -> None:
            status, error = "failed", ""
            try:
                workload = self.workload_of(spec.workload)
                with open_harness(session=self.session, rails=spec.rails, control=control) as harness:
                    status, _thermal = measure_points(spec, harness, workload, list(plan), record, control=control)
            except Exception as exc:  # noqa: BLE001 - reported to the driver, which decides
                log.exception("sweep %s on %s failed", label, self.name)
                error = one_line(exc)
            out.put((END, status, error))

        yield from self._stream(work, out, control, stop, f"{label} 0/{len(plan)}")

    # ------------------------------------------------------------------ one experiment (`fleet run`)
    def plan_experiment(self, spec: ExperimentSpec) -> ExperimentPlan:
        """The records an experiment's runs will carry on this board (board_runs.plan_experiment)."""
        from engine.run.fleet.board_runs import plan_experiment

        return plan_experiment(spec, self.session, self.identity, self.workload_of)

    def experiment(self, spec: ExperimentSpec, seeds: Sequence[FinishedSweep] = (),
                   selector: SelectorFiles | None = None) -> Iterator[BoardItem]:
        """Run one experiment (engine.run.fleet.board_runs), yielding RunProgress items as it runs, then
        its ExperimentRecords, then (END, status, error). A thread runs it so that progress streams."""
        from engine.run.fleet.board_runs import run_on_board

        out: queue.Queue[BoardItem] = queue.Queue()
        control = TrainControl()
        stop = threading.Event()
        label = f"{spec.workload.model}/{spec.workload.task} {spec.policy}"

        def running(text: str) -> None:
            with self._lock:
                self._running = f"{label} {text}"

        def pause(time_s: float) -> None:
            if self.pace > 0:
                stop.wait(time_s * self.pace)  # paced twin: the step's time, in wall time

        def work() -> None:
            try:
                records = run_on_board(spec, self.session, self.identity, seeds=seeds, selector=selector,
                                       workload_of=self.workload_of, control=control, put=out.put, running=running, pause=pause,
                                       policies=self.policies)
                out.put(records)
                out.put((END, records.status, records.error))
            except Exception as exc:  # noqa: BLE001 - reported to the driver, which decides
                log.exception("experiment %s on %s failed", label, self.name)
                out.put((END, "failed", one_line(exc)))

        yield from self._stream(work, out, control, stop, label)

    def _stream(self, work: Callable[[], None], out: queue.Queue[Item], control: TrainControl,
                stop: threading.Event, running: str) -> Iterator[Item]:
        """Run `work` in a thread (it puts items on `out`, ending with (END, status, error)) and
        yield the items as they come: a sweep's points or an experiment's progress stream while it
        runs. One job at a time per board; the board is free again before the END reaches the
        driver, so the driver's next job for it may come at once."""
        with self._lock:
            if self._control is not None:
                raise RuntimeError(f"board {self.name} already runs something")
            self._control, self._stop, self._running = control, stop, running
        thread = threading.Thread(target=work, name=f"fleet-{self.name}", daemon=True)
        thread.start()
        end: Item | None = None
        try:
            while True:
                item = out.get()
                if isinstance(item, tuple) and item and item[0] == END:
                    end = item
                    break
                yield item
        finally:
            control.cancel("the driver stopped reading")  # a generator closed early: stop the board too
            stop.set()
            thread.join()
            with self._lock:
                self._control, self._stop, self._running = None, threading.Event(), ""
        assert end is not None  # the loop above ends only at the END item
        yield end

    def close(self) -> None:
        self.session.close()
