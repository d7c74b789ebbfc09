"""Loaded modules (cubin, PTX or fatbin images) and the kernels in them.

A `Function` holds a strong reference to its `Module`, so a module stays
loaded as long as any of its functions is reachable.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from cuda_core import _driver
from cuda_core._device import Device, resolve_device
from cuda_core._errors import CudaError, CudaInvalidValueError

_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = b"\x50\xed\x55\xba"


def image_kind(image: bytes) -> str:
    """"cubin", "fatbin" or "ptx", judged by the image's first bytes."""
    if image[:4] == _ELF_MAGIC:
        return "cubin"
    if image[:4] == _FATBIN_MAGIC:
        return "fatbin"
    head = image[:4096].lstrip()
    if head.startswith((b"//", b".version", b".target")) or b".entry" in image or b".visible" in image:
        return "ptx"
    raise ValueError(
        "Module.load: the image is neither a cubin (ELF), a fatbin nor PTX text "
        f"(it starts with {image[:8]!r})"
    )


class Module:
    """A module loaded into a device's primary context."""

    __slots__ = ("handle", "device", "kind", "_functions", "_finalizer", "__weakref__")

    def __init__(self, handle: Any, device: Device, kind: str) -> None:
        self.handle = handle
        self.device = device
        self.kind = kind
        self._functions: dict[str, Function] = {}
        self._finalizer = weakref.finalize(self, _driver.release, _driver.api(), "cuModuleUnload", handle)

    @classmethod
    def load(cls, image: bytes | bytearray | memoryview, device: Device | int | None = None) -> Module:
        """Loads a cubin, fatbin or PTX image (PTX is JIT-compiled by the driver)."""
        data = bytes(image)
        if not data:
            raise ValueError("Module.load: the image is empty")
        kind = image_kind(data)
        if kind == "ptx" and not data.endswith(b"\0"):
            data += b"\0"
        dev = resolve_device(device)
        try:
            handle = _driver.call("cuModuleLoadData", data)
        except CudaError as exc:
            exc.call = f"cuModuleLoadData ({kind} image of {len(data)} bytes for {dev.sm_name})"
            raise
        return cls(handle, dev, kind)

    @classmethod
    def load_file(cls, path: str | os.PathLike[str], device: Device | int | None = None) -> Module:
        """`load` of the image in the file ``path`` (a cubin, PTX or fatbin)."""
        with open(path, "rb") as file:
            return cls.load(file.read(), device)

    def get_function(self, name: str) -> Function:
        """The kernel ``name`` (its mangled name for C++ kernels)."""
        if not self._finalizer.alive:
            raise ValueError("the module has been unloaded")
        function = self._functions.get(name)
        if function is None:
            try:
                handle = _driver.call("cuModuleGetFunction", self.handle, name.encode())
            except CudaError as exc:
                if exc.name == "CUDA_ERROR_NOT_FOUND":
                    raise CudaInvalidValueError(
                        exc.code, exc.name, f"no kernel named {name!r} in the module", "cuModuleGetFunction"
                    ) from None
                raise
            function = Function(handle, self, name)
            function._load_now()
            self._functions[name] = function
        return function

    def unload(self) -> None:
        """Unloads now; functions of this module must not be launched afterwards."""
        self._functions.clear()
        self._finalizer()

    def __repr__(self) -> str:
        return f"<Module ({self.kind}) on device {self.device.ordinal}>"


_param_count_missing = False


def _mark_param_count_missing() -> None:
    global _param_count_missing
    _param_count_missing = True


class Function:
    """A kernel in a loaded `Module`."""

    __slots__ = ("handle", "module", "name", "_param_layout", "__weakref__")

    def __init__(self, handle: Any, module: Module, name: str) -> None:
        self.handle = handle  # a CUfunction
        self.module = module  # keeps the module loaded
        self.name = name
        self._param_layout: tuple[tuple[int, int], ...] | None = None

    def __repr__(self) -> str:
        return f"<Function {self.name}>"

    @property
    def device(self) -> Device:
        return self.module.device

    def attribute(self, attribute: str | Any) -> int:
        """A ``CUfunction_attribute`` by enum or name (prefix optional)."""
        if isinstance(attribute, str):
            enum = _driver.enum_member(_driver.api().CUfunction_attribute, "CU_FUNC_ATTRIBUTE_", attribute,
                                       "Function.attribute")
        else:
            enum = attribute
        return int(_driver.call("cuFuncGetAttribute", enum, self.handle))

    @property
    def num_registers(self) -> int:
        """Registers used per thread."""
        return self.attribute("NUM_REGS")

    @property
    def static_shared_memory(self) -> int:
        """Statically allocated shared memory per block (bytes)."""
        return self.attribute("SHARED_SIZE_BYTES")

    @property
    def local_memory(self) -> int:
        """Local (spill/stack) memory per thread (bytes)."""
        return self.attribute("LOCAL_SIZE_BYTES")

    @property
    def max_threads_per_block(self) -> int:
        """The largest block this kernel can be launched with."""
        return self.attribute("MAX_THREADS_PER_BLOCK")

    @property
    def max_dynamic_shared_memory(self) -> int:
        """The dynamic shared memory a launch may ask for (bytes)."""
        return self.attribute("MAX_DYNAMIC_SHARED_SIZE_BYTES")

    @max_dynamic_shared_memory.setter
    def max_dynamic_shared_memory(self, nbytes: int) -> None:
        api = _driver.api()
        limit = self.device.max_shared_memory_per_block_optin - self.static_shared_memory
        if not 0 <= nbytes <= limit:
            raise ValueError(
                f"max_dynamic_shared_memory: {nbytes} bytes requested, the device allows "
                f"at most {limit} for this kernel"
            )
        _driver.call(
            "cuFuncSetAttribute",
            self.handle,
            api.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            nbytes,
        )

    def _load_now(self) -> None:
        # With the driver's lazy module loading a kernel is loaded at its first
        # launch; loading it here keeps that out of stream captures and timings.
        load = getattr(_driver.api(), "cuFuncLoad", None)
        if load is not None:
            try:
                load(self.handle)
            except RuntimeError:  # the bindings know it, the installed driver does not
                pass

    def param_info(self, index: int) -> tuple[int, int]:
        """(offset, size) in bytes of parameter ``index``; an index past the last
        parameter raises `CudaInvalidValueError` (and, during stream capture,
        invalidates the capture: prefer `param_layout` outside captures)."""
        offset, size = _driver.call("cuFuncGetParamInfo", self.handle, index)
        return int(offset), int(size)

    @property
    def param_count(self) -> int | None:
        """How many parameters the kernel takes, or None when the installed driver
        cannot say (cuFuncGetParamCount is new in CUDA 12.8)."""
        count_of = getattr(_driver.api(), "cuFuncGetParamCount", None)
        if count_of is None or _param_count_missing:
            return None
        try:
            err, found = count_of(self.handle)
        except RuntimeError:  # the bindings know it, the installed driver does not
            _mark_param_count_missing()
            return None
        if err:
            _driver.raise_error(err, "cuFuncGetParamCount")
        return int(found)

    @property
    def param_layout(self) -> tuple[tuple[int, int], ...]:
        """(offset, size) in bytes of each kernel parameter, read from the image
        (on drivers without a parameter count, by probing until the driver says
        there is no such parameter)."""
        if self._param_layout is None:
            api = _driver.api()
            count = self.param_count
            layout: list[tuple[int, int]] = []
            if count is not None:
                layout = [self.param_info(index) for index in range(count)]
            else:  # older drivers: probe until the driver says there is no such parameter
                while True:
                    err, offset, size = api.cuFuncGetParamInfo(self.handle, len(layout))
                    if err:
                        if layout or int(err) == 1:  # INVALID_VALUE: past the last parameter
                            break
                        _driver.raise_error(err, "cuFuncGetParamInfo")
                    layout.append((int(offset), int(size)))
            self._param_layout = tuple(layout)
        return self._param_layout
