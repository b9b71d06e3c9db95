"""Pickles written under NumPy 2, read under NumPy 1 (JetPack 6's PyTorch is built against NumPy 1).

NumPy 2 pickles a random Generator (scikit-learn's histogram gradient boosting keeps one) by its bit
generator's class and instance; NumPy 1's unpickling helpers take only the bit generator's name and
raise "<class 'numpy.random._pcg64.PCG64'> is not a known BitGenerator module". The shipped selector
was saved under NumPy 2. `read_numpy2_pickles()` gives NumPy 1's helpers the two forms NumPy 2's accept
(numpy/random/_pickle.py in NumPy 2.x: a class, or an instance), and leaves names to the originals.
"""

from __future__ import annotations

import logging
import threading
from types import ModuleType
from typing import Callable

log = logging.getLogger(__name__)
_lock = threading.Lock()


def read_numpy2_pickles() -> bool:
    """Let NumPy 1 unpickle NumPy 2's random generators; True when NumPy 1's helpers were widened
    (now or before), False under NumPy 2, whose own helpers read both forms."""
    import numpy as np

    if int(np.__version__.split(".", 1)[0]) >= 2:
        return False
    from numpy.random import _pickle

    with _lock:
        if not getattr(_pickle, "_slm_dvfs_reads_numpy2", False):
            _widen(_pickle)
    return True


def _widen(module: ModuleType) -> None:
    from numpy.random import Generator, RandomState
    from numpy.random.bit_generator import BitGenerator

    by_name: Callable[..., BitGenerator] = getattr(module, "__bit_generator_ctor")
    generator_by_name: Callable[..., Generator] = getattr(module, "__generator_ctor")
    state_by_name: Callable[..., RandomState] = getattr(module, "__randomstate_ctor")
    readers: dict[type[BitGenerator], type[BitGenerator]] = {}

    def reader(cls: type[BitGenerator]) -> type[BitGenerator]:
        """`cls`, also taking NumPy 2's pickled state: (the state dict, the SeedSequence)."""
        if cls not in readers:
            plain: Callable[[BitGenerator, object], None] = getattr(cls, "__setstate__")  # typed apart by NumPy 1 and 2

            def setstate(self: BitGenerator, state: object) -> None:
                # NumPy 1 keeps its own seed sequence (a read-only attribute): the state is what the
                # stream continues from; only spawning children from it would differ.
                plain(self, state[0] if isinstance(state, tuple) else state)

            # Its name is the class's: NumPy 1 pickles a bit generator by that name, so a selector
            # saved again here is NumPy 1's plain form.
            readers[cls] = type(cls.__name__, (cls,), {"__setstate__": setstate, "__module__": cls.__module__,
                                                      "__qualname__": cls.__qualname__})
        return readers[cls]

    def bit_generator_ctor(bit_generator: object = "MT19937") -> BitGenerator:
        if isinstance(bit_generator, type) and issubclass(bit_generator, BitGenerator):
            return reader(bit_generator)()  # NumPy 2 names the class itself
        return by_name(bit_generator)

    def generator_ctor(bit_generator_name: object = "MT19937",
                       bit_generator_ctor: Callable[[object], BitGenerator] = bit_generator_ctor) -> Generator:
        if isinstance(bit_generator_name, BitGenerator):
            return Generator(bit_generator_name)  # NumPy 2 hands over the restored bit generator
        return generator_by_name(bit_generator_name, bit_generator_ctor)

    def randomstate_ctor(bit_generator_name: object = "MT19937",
                         bit_generator_ctor: Callable[[object], BitGenerator] = bit_generator_ctor) -> RandomState:
        if isinstance(bit_generator_name, BitGenerator):
            return RandomState(bit_generator_name)
        return state_by_name(bit_generator_name, bit_generator_ctor)

    # Pickles name these module attributes (writing and reading): each keeps the name it replaces.
    for name, fn in (("__bit_generator_ctor", bit_generator_ctor), ("__generator_ctor", generator_ctor),
                     ("__randomstate_ctor", randomstate_ctor)):
        fn.__module__, fn.__name__, fn.__qualname__ = module.__name__, name, name
        setattr(module, name, fn)
    setattr(module, "_slm_dvfs_reads_numpy2", True)
    log.debug("NumPy 1: %s's unpickling helpers read NumPy 2's random generators too", module.__name__)
