"""Optional libraries, imported when a feature needs them: missing, or installed but refusing to load.

"Not installed" and "installed but will not import" want different remedies: pip install does
nothing for the second. The usual cause on a Jetson is NumPy: JetPack 6's PyTorch wheels are built
against NumPy 1, and a release built for NumPy 2 only (pyarrow 26.0, "pyarrow requires NumPy 2.0 or
newer") refuses to import there; the numpy1 extra holds such releases back.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

from engine.core.errors import ConfigError, SlmDvfsError

NUMPY1_REMEDY = ("install with the numpy1 extra, which keeps NumPy 1 and holds back releases that need "
                 "NumPy 2: pip install -e '.[numpy1]' (see the README's Real-board set-up)")


def numpy_version() -> str | None:
    """The installed NumPy's version, read from its metadata (without importing it); None if absent."""
    try:
        return metadata.version("numpy")
    except metadata.PackageNotFoundError:
        return None


def numpy_is_1() -> bool:
    version = numpy_version()
    return version is not None and version.split(".", 1)[0] == "1"


def import_optional(module: str, needed_for: str, install: str,
                    error: type[SlmDvfsError] = ConfigError) -> ModuleType:
    """Import `module` for `needed_for` ("parquet export"); `install` is the remedy when it is not
    installed. Raises `error` (a ConfigError unless told) either way, never the ImportError."""
    library = module.split(".", 1)[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # The library itself is missing (not one of its own imports): that is "not installed".
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            raise error(f"{needed_for} needs {library}, which is not installed", install) from None
        refusal: ImportError = exc
    except ImportError as exc:
        refusal = exc
    reason = str(refusal).strip().splitlines()[0] if str(refusal).strip() else type(refusal).__name__
    if numpy_is_1():
        remedy = f"NumPy {numpy_version()} is installed; {NUMPY1_REMEDY}"
    else:
        remedy = (f"reinstall {library} for this Python and NumPy (pip install --force-reinstall {library}), "
                  "or see the README's Real-board set-up")
    raise error(f"{needed_for} needs {library}, which is installed but does not import here: {reason}",
                remedy) from refusal
