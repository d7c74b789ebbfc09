"""Kernel launches: one-off `launch`, and `PreparedLaunch` for hot loops.

A `PreparedLaunch` lays out the kernel's parameters once in ctypes storage and
keeps the ``void**`` array the driver reads; launching again is one
``cuLaunchKernel`` call, and only the values that changed are rewritten.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from cuda_core import _driver
from cuda_core._memory import DeviceMemory
from cuda_core._module import Function
from cuda_core._stream import Stream

# Scalar C types a kernel parameter may have, by short name.
PARAM_CTYPES: dict[str, type[Any]] = {
    "i8": ctypes.c_int8,
    "u8": ctypes.c_uint8,
    "i16": ctypes.c_int16,
    "u16": ctypes.c_uint16,
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
    "ptr": ctypes.c_uint64,
}
_FLOAT_TYPES = frozenset({"f32", "f64"})
# The values each integer C type holds (ctypes would wrap the others silently).
_INT_RANGES: dict[str, tuple[int, int]] = {
    name: ((-(1 << (8 * ctypes.sizeof(c) - 1)), (1 << (8 * ctypes.sizeof(c) - 1)) - 1) if name.startswith("i")
           else (0, (1 << (8 * ctypes.sizeof(c))) - 1))
    for name, c in PARAM_CTYPES.items() if name not in _FLOAT_TYPES
}


@dataclass(frozen=True)
class KernelArg:
    """A kernel argument with an explicit C type, e.g. ``KernelArg("i32", 7)``."""

    ctype: str
    value: Any

    def __post_init__(self) -> None:
        if self.ctype not in PARAM_CTYPES:
            raise ValueError(
                f"KernelArg: unknown type {self.ctype!r}; expected one of {', '.join(PARAM_CTYPES)}"
            )


ArgValue = Union[KernelArg, DeviceMemory, int, float, bytes]
Dim3 = tuple[int, int, int]


def _dim3(value: int | Sequence[int], what: str) -> Dim3:
    dims = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and d >= 1 for d in dims):
        raise ValueError(f"LaunchConfig: {what} must be 1 to 3 positive ints, got {value!r}")
    padded = dims + (1,) * (3 - len(dims))
    return (padded[0], padded[1], padded[2])


@dataclass(frozen=True, init=False)
class LaunchConfig:
    """Grid, block, dynamic shared memory, and optional cluster / cooperative /
    programmatic dependent launch.

    ``dependent_launch``: the kernel may start before the kernel queued before it on
    its stream has finished (CUDA's programmatic stream serialization), once every
    block of that one has run ``griddepcontrol.launch_dependents`` or exited; it must
    run ``griddepcontrol.wait`` before it touches memory that kernel uses.
    """

    grid: Dim3
    block: Dim3
    shared_memory: int
    cluster: Dim3 | None
    cooperative: bool
    dependent_launch: bool

    def __init__(
        self,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        *,
        shared_memory: int = 0,
        cluster: int | Sequence[int] | None = None,
        cooperative: bool = False,
        dependent_launch: bool = False,
    ) -> None:
        grid3 = _dim3(grid, "grid")
        block3 = _dim3(block, "block")
        if shared_memory < 0:
            raise ValueError(f"LaunchConfig: shared_memory must be >= 0, got {shared_memory}")
        cluster3 = None if cluster is None else _dim3(cluster, "cluster")
        if cluster3 is not None and any(g % c for g, c in zip(grid3, cluster3)):
            raise ValueError(f"LaunchConfig: grid {grid3} is not a multiple of cluster {cluster3}")
        object.__setattr__(self, "grid", grid3)
        object.__setattr__(self, "block", block3)
        object.__setattr__(self, "shared_memory", shared_memory)
        object.__setattr__(self, "cluster", cluster3)
        object.__setattr__(self, "cooperative", cooperative)
        object.__setattr__(self, "dependent_launch", dependent_launch)

    @property
    def extended(self) -> bool:
        """Whether the launch needs ``cuLaunchKernelEx`` (a launch attribute is set)."""
        return self.cluster is not None or self.cooperative or self.dependent_launch


def infer_param_types(function: Function, args: Sequence[ArgValue]) -> list[str]:
    """The C type of each argument: explicit for `KernelArg`, ``ptr`` for device
    memory, and for plain ints/floats the size the kernel image declares."""
    layout = function.param_layout
    if len(layout) != len(args):
        raise ValueError(
            f"launch of {function.name}: the kernel takes {len(layout)} parameter(s), "
            f"{len(args)} argument(s) given"
        )
    types: list[str] = []
    for index, (arg, (_, size)) in enumerate(zip(args, layout)):
        if isinstance(arg, KernelArg):
            ctype = arg.ctype
        elif isinstance(arg, DeviceMemory):
            ctype = "ptr"
        elif isinstance(arg, bool):
            ctype = "u8" if size == 1 else "i32"
        elif isinstance(arg, int):
            ctype = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}.get(size, "")
        elif isinstance(arg, float):
            ctype = {4: "f32", 8: "f64"}.get(size, "")
        elif isinstance(arg, (bytes, bytearray)):
            ctype = f"bytes{len(arg)}"
        else:
            raise TypeError(
                f"launch of {function.name}: argument {index} has unsupported type "
                f"{type(arg).__name__}; pass device memory, an int, a float, bytes or a KernelArg"
            )
        declared = len(arg) if isinstance(arg, (bytes, bytearray)) else ctypes.sizeof(PARAM_CTYPES.get(ctype, ctypes.c_char))
        if not ctype or declared != size:
            raise TypeError(
                f"launch of {function.name}: argument {index} ({type(arg).__name__}, "
                f"{ctype or '?'}) does not match the kernel's {size}-byte parameter"
            )
        types.append(ctype)
    return types


class PreparedLaunch:
    """A launch whose argument layout is packed once.

    >>> prepared = PreparedLaunch(function, LaunchConfig(grid=8, block=128), ["ptr", "i32"])
    >>> prepared.launch(stream, buffer, 1024)     # writes both values, launches
    >>> prepared.launch(stream, buffer, 1024)     # same objects: one driver call
    >>> prepared[1] = 2048; prepared.launch(stream)

    Not thread-safe: give each thread its own prepared launch.
    """

    def __init__(
        self, function: Function, config: LaunchConfig, param_types: Sequence[str]
    ) -> None:
        self.function = function
        self.config = config
        self.param_types = tuple(param_types)
        self._slots: list[Any] = []
        for index, name in enumerate(self.param_types):
            if name.startswith("bytes"):
                self._slots.append((ctypes.c_char * int(name[5:]))())
            elif name in PARAM_CTYPES:
                self._slots.append(PARAM_CTYPES[name]())
            else:
                raise ValueError(f"PreparedLaunch: parameter {index} has unknown type {name!r}")
        self._pointers = (ctypes.c_void_p * max(1, len(self._slots)))(
            *[ctypes.addressof(slot) for slot in self._slots]
        )
        self._params = ctypes.addressof(self._pointers) if self._slots else 0
        self._last: list[Any] = [_UNSET] * len(self._slots)
        self._last_values: tuple[Any, ...] | None = None  # what `launch_values` wrote last
        api = _driver.api()
        self._handle = function.handle
        self._grid = config.grid
        self._block = config.block
        self._device = function.device
        self._launch_fn = api.cuLaunchKernelEx if config.extended else api.cuLaunchKernel
        # Per stream, the complete tuple of driver-call arguments: a repeated
        # launch is then one dictionary lookup and one call.
        self._calls: dict[Stream | None, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return len(self._slots)

    def __setitem__(self, index: int, value: ArgValue) -> None:
        self._write(index, value)

    def set_grid(self, grid: int | Sequence[int]) -> None:
        """Changes the grid of later launches (the cluster must still divide it);
        returns at once when ``grid`` is the current one."""
        if grid == self._grid:  # the common case of a repeated launch: nothing to redo
            return
        self.config = LaunchConfig(
            grid,
            self.config.block,
            shared_memory=self.config.shared_memory,
            cluster=self.config.cluster,
            cooperative=self.config.cooperative,
            dependent_launch=self.config.dependent_launch,
        )
        self._grid = self.config.grid
        self._calls.clear()

    def _write(self, index: int, value: Any) -> None:
        self._last_values = None  # the slots no longer hold that tuple
        slot = self._slots[index]
        kind = self.param_types[index]
        if isinstance(value, KernelArg):
            raw = value.value
        elif isinstance(value, DeviceMemory):
            raw = value.ptr
        else:
            raw = value
        if kind.startswith("bytes"):
            data = bytes(raw)
            if len(data) != len(slot):
                raise ValueError(f"parameter {index}: expected {len(slot)} bytes, got {len(data)}")
            ctypes.memmove(slot, data, len(data))
        elif kind in _FLOAT_TYPES:
            slot.value = float(raw)
        else:
            if isinstance(raw, float):
                raise TypeError(f"parameter {index} is {kind}: got float {raw!r}")
            number = int(raw)
            low, high = _INT_RANGES[kind]
            if not low <= number <= high:
                raise ValueError(f"parameter {index} is {kind}: {number} does not fit (from {low} to {high})")
            slot.value = number
        self._last[index] = value

    def launch(self, stream: Stream | None = None, *args: ArgValue) -> None:
        """Queues the kernel on ``stream`` (default: the legacy default stream).

        ``args``, if given, are all parameters; those equal to the previous
        launch's (same object, or equal number) are not rewritten.
        """
        if args:
            if len(args) != len(self._slots):
                raise ValueError(
                    f"launch of {self.function.name}: {len(self._slots)} argument(s) expected, got {len(args)}"
                )
            last = self._last
            for index, value in enumerate(args):
                previous = last[index]
                # Identity first (cheap for buffers), then equality for ints (new int
                # objects carrying the same pointer or size need no rewrite); floats are
                # always rewritten: -0.0 == 0.0 but their bits differ.
                if value is not previous and (type(value) is not int or type(previous) is not int
                                              or value != previous):
                    self._write(index, value)
        call = self._calls.get(stream)
        if call is None:
            call = self._driver_arguments(stream)
        self._device.activate()
        err = self._launch_fn(*call)[0]
        if err:
            _driver.raise_error(err, f"launch of {self.function.name}")

    def launch_values(self, stream: Stream | None, values: tuple[ArgValue, ...]) -> None:
        """`launch` with every parameter in one tuple: when it is the very tuple of
        the previous `launch_values` (a caller that packs once and launches many
        times), nothing is compared or rewritten."""
        if values is not self._last_values:
            self.launch(stream, *values)  # (its checks, and the rewrite of what changed)
            self._last_values = values
            return
        call = self._calls.get(stream)
        if call is None:
            call = self._driver_arguments(stream)
        self._device.activate()
        err = self._launch_fn(*call)[0]
        if err:
            _driver.raise_error(err, f"launch of {self.function.name}")

    def _driver_arguments(self, stream: Stream | None) -> tuple[Any, ...]:
        """The full argument tuple of the driver call for ``stream``, built once."""
        handle = 0 if stream is None else stream.handle
        if not self.config.extended:
            grid, block = self._grid, self._block
            call: tuple[Any, ...] = (
                self._handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                self.config.shared_memory, handle, self._params, 0,
            )
        else:
            config = _extended_config(_driver.api(), self.config)
            config.hStream = handle
            call = (config, self._handle, self._params, 0)
        if len(self._calls) >= 16:  # bounded: the cache keeps its streams alive
            self._calls.clear()
        self._calls[stream] = call
        return call

    __call__ = launch


class _Unset:
    __slots__ = ()


_UNSET = _Unset()


def _extended_config(api: Any, config: LaunchConfig) -> Any:
    ex = api.CUlaunchConfig()
    ex.gridDimX, ex.gridDimY, ex.gridDimZ = config.grid
    ex.blockDimX, ex.blockDimY, ex.blockDimZ = config.block
    ex.sharedMemBytes = config.shared_memory
    attributes = []
    if config.cluster is not None:
        attr = api.CUlaunchAttribute()
        attr.id = api.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = config.cluster
        attributes.append(attr)
    if config.cooperative:
        attr = api.CUlaunchAttribute()
        attr.id = api.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attributes.append(attr)
    if config.dependent_launch:
        attr = api.CUlaunchAttribute()
        attr.id = api.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attributes.append(attr)
    ex.attrs = attributes
    ex.numAttrs = len(attributes)
    return ex


def launch(
    function: Function,
    config: LaunchConfig,
    *args: ArgValue,
    stream: Stream | None = None,
) -> None:
    """Launches ``function`` once; argument types come from `infer_param_types`.

    For repeated launches build a `PreparedLaunch` instead.
    """
    prepared = PreparedLaunch(function, config, infer_param_types(function, args))
    prepared.launch(stream, *args)
