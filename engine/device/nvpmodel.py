"""nvpmodel: the power-mode conf (parse and write), `nvpmodel -q` output, and running an L4T tool
(which tool may run, and from where: `jetson/l4t_tools.py`).

Conf syntax as shipped in L4T (`etc/nvpmodel/nvpmodel_p3701_0000.conf`):

    < PARAM TYPE=CLOCK NAME=GPU >          a named parameter and the files it drives
    MAX_FREQ /sys/.../max_freq
    < POWER_MODEL ID=2 NAME=MODE_30W >     a mode: `PARAM ARG VALUE` lines (-1 = no cap)
    GPU MAX_FREQ 612000000
    < PM_CONFIG DEFAULT=2 >                the mode used on first boot

CPU clocks are in kHz in the conf (cpufreq's unit), GPU and EMC in Hz.
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from typing import Sequence

from engine.device.base import PowerMode
from engine.core.errors import DeviceError

log = logging.getLogger(__name__)

R36_GPU_DEVFREQ = "/sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
EMC_CAP_FILE = "/sys/kernel/nvpmodel_emc_cap/emc_iso_cap"

_BLOCK = re.compile(r"^<\s*([A-Z_]+)\s*(.*?)\s*>$")
_ATTR = re.compile(r"([A-Z_]+)=(\S+)")


# --------------------------------------------------------------------------- conf


@dataclass(frozen=True)
class _Param:
    name: str
    type: str  # FILE | CLOCK
    args: dict[str, str]  # ARG -> path


def parse_conf(text: str) -> tuple[tuple[PowerMode, ...], int]:
    """Modes (by id, ascending) and the default id of an nvpmodel conf.

    Raises DeviceError when the text has no POWER_MODEL block.
    """
    params: dict[str, _Param] = {}
    modes: dict[int, tuple[str, list[tuple[str, str, str]]]] = {}
    default_id: int | None = None
    block: tuple[str, dict[str, str]] | None = None
    current_param: _Param | None = None
    current_mode: list[tuple[str, str, str]] | None = None

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _BLOCK.match(line)
        if m:
            kind, attrs = m.group(1), dict(_ATTR.findall(m.group(2)))
            block = (kind, attrs)
            current_param, current_mode = None, None
            if kind == "PARAM" and "NAME" in attrs:
                current_param = _Param(attrs["NAME"], attrs.get("TYPE", "FILE"), {})
                params[current_param.name] = current_param
            elif kind == "POWER_MODEL":
                try:
                    mode_id = int(attrs["ID"])
                except (KeyError, ValueError):
                    raise DeviceError(
                        f"nvpmodel conf line {lineno}: POWER_MODEL without a numeric ID: {raw.strip()!r}",
                        "fix the conf (compare with the one L4T ships in /etc/nvpmodel/)",
                    ) from None
                current_mode = []
                modes[mode_id] = (attrs.get("NAME", f"MODE_{mode_id}"), current_mode)
            elif kind == "PM_CONFIG" and "DEFAULT" in attrs:
                try:
                    default_id = int(attrs["DEFAULT"])
                except ValueError:
                    log.warning("nvpmodel conf line %d: non-numeric DEFAULT ignored", lineno)
            continue
        if block is None:
            continue
        tokens = line.split()
        if current_param is not None and len(tokens) >= 2:
            current_param.args[tokens[0]] = tokens[1]
        elif current_mode is not None and len(tokens) >= 3:
            current_mode.append((tokens[0], tokens[1], tokens[2]))

    if not modes:
        raise DeviceError(
            "the nvpmodel conf defines no POWER_MODEL",
            "check etc/nvpmodel.conf (it should link to etc/nvpmodel/nvpmodel_p3701_*.conf)",
        )
    result = tuple(_mode(mid, name, lines, params) for mid, (name, lines) in sorted(modes.items()))
    if default_id is None or default_id not in modes:
        default_id = result[0].id
    return result, default_id


def _is_cpu_clock(name: str, params: dict[str, _Param]) -> bool:
    p = params.get(name)
    if p is not None:
        return p.type == "CLOCK" and (name.startswith("CPU") or any("cpufreq" in v for v in p.args.values()))
    return name.startswith("CPU_") and name != "CPU_ONLINE"


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _mode(mode_id: int, name: str, lines: list[tuple[str, str, str]], params: dict[str, _Param]) -> PowerMode:
    online: list[int] = []
    cpu_caps: list[int | None] = []
    gpu_cap: int | None = None
    emc_cap: int | None = None
    for param, arg, value in lines:
        v = _int(value)
        if param == "CPU_ONLINE":
            online.append(1 if v == 1 else 0)
        elif arg == "MAX_FREQ" and v is not None:
            cap = v if v > 0 else None  # -1 (and EMC's 0) mean "no cap"
            if param == "GPU":
                gpu_cap = cap
            elif param == "EMC":
                emc_cap = cap
            elif _is_cpu_clock(param, params):
                cpu_caps.append(None if cap is None else cap * 1000)  # kHz -> Hz
    cpu_cap = None
    if cpu_caps and all(c is not None for c in cpu_caps):
        cpu_cap = max(c for c in cpu_caps if c is not None)
    return PowerMode(
        id=mode_id,
        name=name,
        online_cpus=sum(online) if online else None,
        cpu_max_hz=cpu_cap,
        gpu_max_hz=gpu_cap,
        emc_max_hz=emc_cap,
    )


def format_conf(
    modes: Sequence[PowerMode],
    default_id: int,
    *,
    gpu_devfreq: str = R36_GPU_DEVFREQ,
    cpu_count: int = 12,
    cpu_policies: Sequence[int] = (0, 4, 8),
) -> str:
    """An nvpmodel conf in L4T's syntax; `parse_conf(format_conf(m, d)) == (m, d)` for
    modes whose CPU caps are whole kHz."""
    if not modes:
        raise DeviceError("no power modes to write", "pass at least one PowerMode")
    if default_id not in {m.id for m in modes}:
        raise DeviceError(f"default mode {default_id} is not among the modes", "pick one of the mode ids")
    gpu_devfreq = "/" + gpu_devfreq.lstrip("/")
    clusters = [(f"CPU_A78_{i}", cpu) for i, cpu in enumerate(cpu_policies)]
    out: list[str] = [
        "# nvpmodel configuration for NVIDIA Jetson AGX Orin",
        "# (L4T syntax; CPU clocks in kHz, GPU and EMC in Hz, -1 = no cap)",
        "",
        "< PARAM TYPE=FILE NAME=CPU_ONLINE >",
        *(f"CORE_{c} /sys/devices/system/cpu/cpu{c}/online" for c in range(cpu_count)),
        "",
    ]
    for name, cpu in clusters:
        base = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq"
        out += [
            f"< PARAM TYPE=CLOCK NAME={name} >",
            f"FREQ_TABLE {base}/scaling_available_frequencies",
            f"MAX_FREQ {base}/scaling_max_freq",
            f"MIN_FREQ {base}/scaling_min_freq",
            "",
        ]
    out += [
        "< PARAM TYPE=CLOCK NAME=GPU >",
        f"FREQ_TABLE {gpu_devfreq}/available_frequencies",
        f"MAX_FREQ {gpu_devfreq}/max_freq",
        f"MIN_FREQ {gpu_devfreq}/min_freq",
        "",
        "< PARAM TYPE=CLOCK NAME=EMC >",
        f"MAX_FREQ {EMC_CAP_FILE}",
        "",
    ]
    for mode in sorted(modes, key=lambda m: m.id):
        out.append(f"< POWER_MODEL ID={mode.id} NAME={mode.name} >")
        online = cpu_count if mode.online_cpus is None else mode.online_cpus
        out += [f"CPU_ONLINE CORE_{c} {1 if c < online else 0}" for c in range(cpu_count)]
        cpu_khz = -1 if mode.cpu_max_hz is None else mode.cpu_max_hz // 1000
        out += [f"{name} MAX_FREQ {cpu_khz}" for name, _ in clusters]
        out.append("GPU MIN_FREQ 0")
        out.append(f"GPU MAX_FREQ {-1 if mode.gpu_max_hz is None else mode.gpu_max_hz}")
        out.append(f"EMC MAX_FREQ {0 if mode.emc_max_hz is None else mode.emc_max_hz}")
        out.append("")
    out.append(f"< PM_CONFIG DEFAULT={default_id} >")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- command


def parse_query(output: str, cmd: str = "nvpmodel") -> tuple[int, str]:
    """Parse `nvpmodel -q`: `NV Power Mode: NAME` then the id on the next line
    (an `NV Fan Mode:` line may come first)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("NV Power Mode:"):
            name = line.split(":", 1)[1].strip()
            for nxt in lines[i + 1 :]:
                if nxt.isdigit():
                    return int(nxt), name
                break
    raise DeviceError(
        f"could not read the power mode from `{cmd} -q`: {output.strip()[:200]!r}",
        "run `sudo nvpmodel -q` by hand; it should print `NV Power Mode: NAME` and the id",
    )


_NVPMODEL_MISSING = "install L4T's nvpmodel at /usr/sbin/nvpmodel (it ships with JetPack)"


def run_tool(
    argv: Sequence[str], timeout_s: float, *, stdin: str | None = None, missing_remedy: str = _NVPMODEL_MISSING
) -> str:
    """Run an L4T tool at a fixed system path (`l4t_tools` picks it); every way it can fail
    becomes a DeviceError that says what to do."""
    argv = [str(a) for a in argv]
    cmd, shown = argv[0], " ".join(argv)
    try:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise DeviceError(f"{cmd} not found", missing_remedy) from None
    except PermissionError:
        raise DeviceError(
            f"no permission to run {cmd}", "run as root (`sudo slm-dvfs ...`) or check the file's mode"
        ) from None
    except OSError as exc:
        raise DeviceError(f"cannot run {cmd}: {exc.strerror}", missing_remedy) from None
    except subprocess.TimeoutExpired:
        raise DeviceError(
            f"`{shown}` did not finish within {timeout_s:g} s",
            "check the board (another instance may be running) and retry",
        ) from None
    if proc.returncode != 0:
        err = (proc.stderr.strip() or proc.stdout.strip())[:300] or f"exit {proc.returncode}"
        low = err.lower()
        if "permission" in low or "root" in low or "not permitted" in low:
            raise DeviceError(f"`{shown}` was refused: {err}", "run as root (`sudo slm-dvfs ...`)")
        raise DeviceError(
            f"`{shown}` failed (exit {proc.returncode}): {err}",
            "run the same command by hand to see why",
        )
    return proc.stdout
