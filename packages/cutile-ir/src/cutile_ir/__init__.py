"""Pure-Python CUDA Tile IR: types, ops, builder, verifier, printer, bytecode writer and reader.

Build a module with :class:`Module` (``m.add_entry``) and :class:`Builder` (any op of the
table is a builder method), check it with :func:`verify`, print it with
:func:`print_module` (the text of NVIDIA's ``tileirdisasm``), encode it with
:func:`write_bytecode` (bytecode 13.1–13.4) and read bytecode back with
:func:`read_bytecode`. One op table (:data:`OPS`, :func:`get_op`, :func:`register_op`)
drives all of them. Errors derive from :class:`IRError`.
"""


from typing import TYPE_CHECKING, Any

# The public names, declared once: imported here by static tools, and on first use
# by `__getattr__` below (importing cutile_ir costs only the modules used).
if TYPE_CHECKING:
    from ._attributes import (
        ArrayAttr, AtomicRMWMode, BoolAttr, Bounded, ComparisonOrdering, ComparisonPredicate,
        DenseElements, DictAttr, DivBy, FloatAttr, IntegerAttr, IntegerOverflow, Location,
        MemoryOrdering, MemoryScope, OptimizationHints, RoundingMode, SameElements, Signedness,
        StringAttr, SymbolVisibility, TypeAttr, decode_element, encode_element,
    )
    from ._arch import Arch, parse_arch
    from ._builder import Builder, IfOp, RegionOp, add_function, make_op
    from ._bytecode_reader import bytecode_version, read_bytecode
    from ._bytecode_writer import write_bytecode
    from ._printer import print_function, print_module
    from ._errors import ArchError, BytecodeError, IRError, IRTypeError, VerificationError, VersionError
    from ._ir import Block, Function, Global, Module, Operation, Region, Value, differences
    from ._ops import (
        OPS, Arity, AttrDef, AttrKind, ElementRule, OpDef, OperandDef, RegionRule, ResultDef, accepted_element_types,
        get_op, ops_in, register_op,
    )
    from ._types import (
        BF16, DYNAMIC, F16, F32, F4E2M1FN, F64, F8E4M3FN, F8E5M2, F8E5M3FNU, F8E8M0FNU, FLOAT_FORMATS, I1, I4, I8, I16,
        I32, I64, SCALAR_TYPES, TF32, TOKEN, FloatFormat, FunctionType, GatherScatterViewType, PaddingValue,
        PartitionViewType, PointerType, ScalarType, StridedViewType, TensorViewType, TileType,
        TokenType, Type, ptr, scalar, tile,
    )
    from ._verifier import problems, verify
    from ._versions import DEFAULT_VERSION, SUPPORTED_VERSIONS, V13_1, V13_2, V13_3, V13_4, Version

__all__ = [
    "Arch", "ArchError", "parse_arch",
    "ArrayAttr", "Arity", "AtomicRMWMode", "AttrDef", "AttrKind", "BF16", "Block", "BoolAttr",
    "Bounded", "Builder", "BytecodeError", "ComparisonOrdering", "ComparisonPredicate",
    "DEFAULT_VERSION", "DYNAMIC", "DenseElements", "DictAttr", "DivBy", "ElementRule", "F16", "F32", "F4E2M1FN",
    "F64", "F8E4M3FN", "F8E5M2", "F8E5M3FNU", "F8E8M0FNU", "FloatAttr", "Function", "FunctionType",
    "FLOAT_FORMATS", "FloatFormat", "GatherScatterViewType", "Global", "I1", "I16", "I32", "I4", "I64", "I8", "IRError",
    "IRTypeError", "IfOp", "IntegerAttr", "IntegerOverflow", "Location", "MemoryOrdering",
    "MemoryScope", "Module", "OPS", "OpDef", "Operation", "OperandDef", "OptimizationHints",
    "PaddingValue", "PartitionViewType", "PointerType", "Region", "RegionOp", "RegionRule", "ResultDef",
    "RoundingMode", "SCALAR_TYPES", "SUPPORTED_VERSIONS", "SameElements", "ScalarType",
    "Signedness", "StridedViewType", "StringAttr", "SymbolVisibility", "TF32", "TOKEN",
    "TensorViewType", "TileType", "TokenType", "Type", "TypeAttr", "V13_1", "V13_2", "V13_3",
    "V13_4", "Value", "accepted_element_types", "bytecode_version", "decode_element", "encode_element", "differences", "read_bytecode", "VerificationError", "Version", "VersionError", "add_function", "get_op",
    "make_op", "ops_in", "print_function", "print_module", "problems", "register_op", "ptr", "scalar", "tile", "verify", "write_bytecode",
]


__version__ = "0.1.0"  # the distribution's version (tests/test_release.py keeps them equal)


if not TYPE_CHECKING:  # (static tools see the imports above, not a catch-all __getattr__)
    from ._lazy import exported as _exported, lazy_exports as _lazy_exports

    _EXPORTS = _lazy_exports(__name__, __file__)

    def __getattr__(name: str) -> Any:
        return _exported(globals(), _EXPORTS, name)

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
