"""`slm-dvfs clockd --install` / `--uninstall`: the systemd unit and the group of the clock service."""

from __future__ import annotations

import grp
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from engine.core import paths
from engine.core.errors import ConfigError

log = logging.getLogger(__name__)

UNIT_NAME = "slm-dvfs-clockd.service"
UNIT_DIR = Path("etc/systemd/system")
# Fixed system paths: the installer runs as root and never takes a tool from $PATH.
GROUPADD = "/usr/sbin/groupadd"
GROUPDEL = "/usr/sbin/groupdel"


def unit_template() -> str:
    return (paths.profiles_dir() / "systemd" / UNIT_NAME).read_text()


# ProtectHome=yes in the unit hides these from the service: a program under them cannot start.
_HIDDEN = (Path("/home"), Path("/root"), Path("/run/user"))
_SYSTEM_WIDE = ("install slm-dvfs system-wide, owned by root and writable by root alone, e.g. "
                "`sudo python3 -m venv /opt/slm-dvfs && sudo /opt/slm-dvfs/bin/pip install <slm-dvfs>`, "
                "then run `sudo /opt/slm-dvfs/bin/slm-dvfs clockd --install`")


def package_dir() -> Path:
    """The engine package this slm-dvfs runs from."""
    import engine

    return Path(engine.__file__).resolve().parent


def _script() -> Path | None:
    script = Path(sys.executable).parent / "slm-dvfs"
    return script if script.is_file() and os.access(script, os.X_OK) else None


def exec_command() -> str:
    """How systemd should start this very slm-dvfs: its console script beside the interpreter,
    else the interpreter with `-m engine`."""
    script = _script()
    if script is not None:
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m engine"


def _chain(path: Path) -> list[Path]:
    """`path` and every folder above it, as written and as resolved (a link's target too)."""
    out: list[Path] = []
    for p in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        out.extend(q for q in (p, *p.parents) if q not in out)
    return out


def _unsafe(path: Path) -> str | None:
    """Why a non-root user could change `path` (None: only root can)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be checked ({exc.strerror})"
    if st.st_uid != 0:
        return f"{path} is owned by uid {st.st_uid}"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):  # a link's mode means nothing
        return f"{path} is writable by others than root (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def check_program() -> None:
    """Refuse to put this slm-dvfs in a root unit unless only root can change it: its interpreter,
    console script and engine package, and every folder on their paths (as written and resolved),
    owned by root and writable by nobody else; and outside what ProtectHome hides."""
    program = [Path(sys.executable), package_dir()]
    script = _script()
    if script is not None:
        program.insert(1, script)
    problems: list[str] = []
    for target in program:
        for p in _chain(target):
            why = _unsafe(p)
            if why is not None and why not in problems:
                problems.append(why)
    if problems:
        raise ConfigError("the clock service would run as root from a slm-dvfs others can change, so they would "
                          "become root: " + "; ".join(problems[:4]) + ("; ..." if len(problems) > 4 else ""),
                          _SYSTEM_WIDE)
    for target in program:
        real = Path(os.path.realpath(target))
        hidden = next((h for h in _HIDDEN if real == h or h in real.parents), None)
        if hidden is not None:
            raise ConfigError(f"{target} lies under {hidden} (as {real}), which the unit's ProtectHome=yes hides "
                              "from the service: it could not start", _SYSTEM_WIDE)


def unit_text(group: str) -> str:
    return unit_template().replace("@SLM_DVFS@", exec_command()).replace("@GROUP@", shlex.quote(group))


def _run(argv: list[str]) -> None:
    try:
        subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ConfigError(f"{argv[0]} is missing", "install the distribution's user tools (passwd / shadow-utils)") from None
    except subprocess.CalledProcessError as exc:
        raise ConfigError(f"`{' '.join(argv)}` failed: {exc.stderr.strip() or exc.returncode}",
                          "fix the cause above and run the command again") from None


def _group_exists(group: str) -> bool:
    try:
        grp.getgrnam(group)
    except KeyError:
        return False
    return True


def _check_group_name(group: str) -> None:
    if not group or not all(c.isalnum() or c in "-_" for c in group) or group[0] == "-":
        raise ConfigError(f"{group!r} is not a group name", "use letters, digits, - and _ (e.g. slm-dvfs)")


def install(group: str, prefix: Path | None = None) -> list[str]:
    """Create `group` (if missing) and write the unit under `prefix` (default /). Returns what it did."""
    _check_group_name(group)
    if os.geteuid() != 0:
        raise ConfigError("installing the clock service needs root", "run `sudo slm-dvfs clockd --install`")
    check_program()  # before anything changes
    done = []
    if _group_exists(group):
        done.append(f"group {group} exists")
    else:
        _run([GROUPADD, "--system", group])
        done.append(f"created group {group}")
    unit = Path(prefix or "/") / UNIT_DIR / UNIT_NAME
    unit.parent.mkdir(parents=True, exist_ok=True)
    tmp = unit.with_name(unit.name + ".tmp")
    tmp.write_text(unit_text(group))
    tmp.chmod(0o644)
    os.replace(tmp, unit)
    done.append(f"wrote {unit}")
    return done


def next_steps(group: str) -> list[str]:
    return [
        "sudo systemctl daemon-reload",
        "sudo systemctl enable --now slm-dvfs-clockd",
        f"sudo usermod -aG {group} $USER   # for each user who may change clocks",
        "log out and in again (group membership is read at login); `id` should list the group",
    ]


def uninstall(group: str, prefix: Path | None = None) -> list[str]:
    """Remove the unit and the group. Stop the service first (`systemctl disable --now`)."""
    _check_group_name(group)
    if os.geteuid() != 0:
        raise ConfigError("uninstalling the clock service needs root", "run `sudo slm-dvfs clockd --uninstall`")
    done = []
    unit = Path(prefix or "/") / UNIT_DIR / UNIT_NAME
    if unit.exists():
        unit.unlink()
        done.append(f"removed {unit}")
    if _group_exists(group):
        _run([GROUPDEL, group])
        done.append(f"removed group {group}")
    if shutil.which("systemctl") and prefix is None:
        done.append("now run `sudo systemctl daemon-reload`")
    return done
