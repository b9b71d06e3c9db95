"""Who a Jetson is: board and module names, the L4T and JetPack releases, and whether the
tree under the root is a digital twin (it carries a `.slm-dvfs-twin` marker file)."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

from engine.core.errors import DeviceError
from engine.device.base import DeviceIdentity
from engine.device.sysfs import TWIN_MARKER, SysfsTree

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

log = logging.getLogger(__name__)

# Module part numbers as they appear in the device tree's `compatible`.
MODULES = {
    "p3701-0000": "P3701-0000 (AGX Orin 64GB)",
    "p3701-0004": "P3701-0004 (AGX Orin 32GB)",
    "p3701-0005": "P3701-0005 (AGX Orin 64GB)",
    "p3701-0008": "P3701-0008 (AGX Orin Industrial 64GB)",
}
# L4T release -> JetPack, exact first, then by major.minor, then by major.
# JetPack 7 (r38: Thor only; r39: the Orin too): jetson-stats' NVIDIA_JETPACK (jtop/core/jetson_variables.py).
_JETPACK_EXACT = {
    "39.2.0": "7.2", "39.0.0": "7.2 EA", "38.4.0": "7.1", "38.2.2": "7.0", "38.2.1": "7.0", "38.2.0": "7.0",
    "36.4.4": "6.2.1", "36.4.3": "6.2", "36.4.0": "6.1", "36.3.0": "6.0", "36.2.0": "6.0 DP",
    "35.6.1": "5.1.5", "35.6.0": "5.1.4", "35.5.0": "5.1.3", "35.4.1": "5.1.2", "35.3.1": "5.1.1",
    "35.2.1": "5.1", "35.1.0": "5.0.2", "34.1.1": "5.0.1 DP", "34.1.0": "5.0 DP",
    "32.7.6": "4.6.6", "32.7.5": "4.6.5", "32.7.4": "4.6.4", "32.7.3": "4.6.3", "32.7.2": "4.6.2",
    "32.7.1": "4.6.1", "32.6.1": "4.6", "32.5.1": "4.5.1", "32.5.0": "4.5",
}  # fmt: skip
_JETPACK_MINOR = {"39.2": "7.2", "38.4": "7.1", "38.2": "7.0",
                  "36.4": "6.1/6.2", "36.3": "6.0", "35.6": "5.1.4", "35.5": "5.1.3", "35.4": "5.1.2", "32.7": "4.6.x"}
_JETPACK_MAJOR = {"39": "7.x", "38": "7.x", "36": "6.x", "35": "5.1.x", "34": "5.0 DP", "32": "4.x"}


def jetpack_for(l4t: str | None) -> str | None:
    """The JetPack release that ships an L4T release ("36.3.0" -> "6.0")."""
    if not l4t:
        return None
    parts = l4t.split(".")
    return (
        _JETPACK_EXACT.get(l4t)
        or _JETPACK_MINOR.get(".".join(parts[:2]))
        or _JETPACK_MAJOR.get(parts[0])
    )


def module_for(compatible: str) -> str:
    """The module part from a NUL-separated `compatible` ("nvidia,p3737-0000+p3701-0000...")."""
    parts = re.findall(r"p\d{4}-\d{4}", compatible.replace("\0", " "))
    for part in parts:
        if part in MODULES:
            return MODULES[part]
    modules = [p for p in parts if not p.startswith("p3737")]  # p3737 is the carrier board
    return modules[0].upper() if modules else "unknown module"


def read_identity(tree: SysfsTree) -> DeviceIdentity:
    """The identity of the board (or twin) whose files are under `tree`."""
    board = tree.read_str("proc/device-tree/model").replace("\0", "").strip()
    try:
        module = module_for(tree.read_str("proc/device-tree/compatible"))
    except DeviceError:
        module = "unknown module"
    l4t = read_l4t(tree)
    profile = twin_profile(tree.root)
    return DeviceIdentity(
        board=board,
        module=module,
        l4t=l4t,
        jetpack=jetpack_for(l4t),
        is_twin=profile is not None,
        profile=profile or None,
        serial=read_serial(tree),
    )


def read_serial(tree: SysfsTree) -> str | None:
    """The device tree's serial-number (NUL-terminated on a board), None where there is none."""
    try:
        serial = tree.read_str("proc/device-tree/serial-number").replace("\0", "").strip()
    except (DeviceError, UnicodeDecodeError):
        return None
    return serial or None


def read_l4t(tree: SysfsTree) -> str | None:
    """The L4T release from etc/nv_tegra_release ("36.3.0"), None when it cannot be read."""
    try:
        text = tree.read_str("etc/nv_tegra_release")
    except DeviceError:
        return None
    m = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    if not m:
        log.warning("unrecognised etc/nv_tegra_release: %r", text[:120])
        return None
    rev = m.group(2).rstrip(".")
    return f"{m.group(1)}.{rev}" if rev.count(".") >= 1 else f"{m.group(1)}.{rev}.0"


def twin_profile(root: Path) -> str | None:
    """The twin's profile name from its marker; "" for a twin without a profile, None for a board.
    The marker is read as every tree file is (never through a link out of the tree)."""
    tree = SysfsTree(root)
    if not tree.exists(TWIN_MARKER):
        return None
    try:
        data = tomllib.loads(tree.read_str(TWIN_MARKER))
    except tomllib.TOMLDecodeError as exc:
        raise DeviceError(
            f"{tree.path(TWIN_MARKER)} is not valid TOML ({exc})",
            'it should hold one line like `profile = "agx-orin-64gb"`; re-create the twin',
        ) from None
    return str(data.get("profile", ""))
