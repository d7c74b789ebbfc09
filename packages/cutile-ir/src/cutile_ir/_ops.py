"""The op table: one record per Tile IR operation, the single source of truth.

Builder, verifier, printer, bytecode writer and reader all walk these records; adding an
op is adding one entry to :data:`OPS`. Facts (opcodes, operand/attribute order, the
version each field appeared in) follow NVIDIA's cuda-tile ODS definitions. The record
(:class:`OpDef`, in :mod:`._opdef`) also carries what is particular to an op in the
verifier and printer: its extra rule, minimum SM, accepted element types, region rules,
result naming and custom printer, each a function of the verifier or printer it names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from . import _printer as P
from . import _verifier as V
from ._attributes import (
    AtomicRMWMode, ComparisonOrdering, ComparisonPredicate, IntegerOverflow, MemoryOrdering,
    MemoryScope, RoundingMode, Signedness, SymbolVisibility,
)
from ._errors import IRError
from ._opdef import (
    Arity, AttrDef, AttrKind, Checker, ElementRule, OpDef, OperandDef, RegionRule, ResultDef, A, O, R,
)
from ._printer import Printer
from ._types import BF16, F16, F32, F64, I32, I64, ScalarType
from ._versions import V13_1, V13_2, V13_3, V13_4, Version

ONE, OPT, VAR = Arity.ONE, Arity.OPTIONAL, Arity.VARIADIC
K = AttrKind

_TY = "attr-dict `:` type($result)"
_CAST = "attr-dict `:` type($source) `->` type($result)"
_CONV = "attr-dict `:` type($from) `->` type($to)"
_FTZ = "(`flush_to_zero` $flush_to_zero^)?"
_OVF = "(`overflow` `` $overflow^)?"
_ROUND = A("rounding_mode", K.ENUM, RoundingMode)
_UNIT_FTZ = A("flush_to_zero", K.UNIT)
_OVERFLOW = A("overflow", K.ENUM, IntegerOverflow, default=IntegerOverflow.NONE)
_SIGN = A("signedness", K.ENUM, Signedness)
_ORDERING = A("memory_ordering_semantics", K.ENUM, MemoryOrdering)
_SCOPE_OPT = A("memory_scope", K.ENUM, MemoryScope, optional=True)
_HINTS = A("optimization_hints", K.HINTS, optional=True)
_INBOUNDS = A("inbounds", K.BOOL_ARRAY, default=(), since=V13_4, per_operand="index")


def _unary_f(name: str, opcode: int, *attrs: AttrDef, fmt_mid: str = "", since: Version = V13_1) -> OpDef:
    return OpDef(name, opcode, since, (O("source", "base_float_tile"),), attrs,
                 (R("result", "base_float_tile", infer="same:source"),), same=(("source", "result"),),
                 pure=True, fmt=f"$source {fmt_mid} {_TY}")


def _binary_f(name: str, opcode: int, *attrs: AttrDef, fmt_mid: str = "", a: str = "lhs", b: str = "rhs",
              since: Version = V13_1) -> OpDef:
    return OpDef(name, opcode, since, (O(a, "base_float_tile"), O(b, "base_float_tile")), attrs,
                 (R("result", "base_float_tile", infer=f"same:{a}"),), same=((a, b, "result"),),
                 pure=True, fmt=f"${a} `,` ${b} {fmt_mid} {_TY}")


def _binary_i(name: str, opcode: int, *attrs: AttrDef, fmt_mid: str = "", a: str = "lhs", b: str = "rhs",
              pure: bool = True) -> OpDef:
    return OpDef(name, opcode, V13_1, (O(a, "int_tile"), O(b, "int_tile")), attrs,
                 (R("result", "int_tile", infer=f"same:{a}"),), same=((a, b, "result"),),
                 pure=pure, fmt=f"${a} `,` ${b} {fmt_mid} {_TY}")


def _cast(name: str, opcode: int, src: str, dst: str, since: Version = V13_1, asm_name: str | None = None,
          check: Checker | None = None) -> OpDef:
    return OpDef(name, opcode, since, (O("source", src),), (), (R("result", dst),),
                 pure=True, fmt=f"$source {_CAST}", asm_name=asm_name, check=check)


def _terminator(name: str, opcode: int, parents: tuple[str, ...], *, pure: bool = False,
                elided_when_empty: bool = False) -> OpDef:
    return OpDef(name, opcode, V13_1, (O("operands", "any", VAR),), terminator=True, parents=parents,
                 pure=pure, elided_when_empty=elided_when_empty,
                 fmt="attr-dict ($operands^ `:` type($operands))?")


# -- regions: what each region op's body takes and ends with ----------------------------
_FOR_REGION = RegionRule(V.for_block_args, "continue", V.for_end, loop_exits=(("continue", V.iter_value_types),),
                         arg_names=P.for_arg_names)
_LOOP_REGION = RegionRule(V.loop_block_args, "continue or break", V.loop_end,
                          loop_exits=(("continue", V.iter_value_types), ("break", V.result_types)))
_IF_REGION = RegionRule(V.no_block_args, "yield (or continue/break in a loop)", V.if_end,
                        passes_to_loop=("break", "continue"), may_be_empty=V.else_may_be_empty)
_REDUCE_REGION = RegionRule(V.reduce_block_args, "yield", V.reduce_end, pure_body=True, arg_names=P.reduce_arg_names)
_SCAN_REGION = RegionRule(V.reduce_block_args, "yield", V.reduce_end, pure_body=True)

# -- atomics: the element types each mode takes, as Tile IR (tileiras 13.x) verifies them --
_WIDE_INTS: frozenset[ScalarType] = frozenset({I32, I64})
_ATOMIC_FLOATS: frozenset[ScalarType] = frozenset({F16, BF16, F32, F64})
_WORDS: frozenset[ScalarType] = frozenset({I32, I64, F32, F64})  # what exchange and compare-and-swap take
_INTEGER_MODES = (AtomicRMWMode.AND, AtomicRMWMode.OR, AtomicRMWMode.XOR, AtomicRMWMode.ADD, AtomicRMWMode.MAX,
                  AtomicRMWMode.MIN, AtomicRMWMode.UMAX, AtomicRMWMode.UMIN)
_RMW_ELEMENTS: tuple[tuple[Any, frozenset[ScalarType]], ...] = (
    *((m, _WIDE_INTS) for m in _INTEGER_MODES), (AtomicRMWMode.ADDF, _ATOMIC_FLOATS), (AtomicRMWMode.XCHG, _WORDS))
#: A reduction into a view has no exchange.
_REDUCTION_ELEMENTS: tuple[tuple[Any, frozenset[ScalarType]], ...] = (
    *((m, _WIDE_INTS) for m in _INTEGER_MODES), (AtomicRMWMode.ADDF, _ATOMIC_FLOATS),
    (AtomicRMWMode.XCHG, frozenset()))
_CAS_ELEMENTS = _WORDS
#: Float add of bf16 needs sm_90 (tileiras: "atomicRMW ADDF with bf16 is not supported" on sm_80).
_ATOMIC_MIN_SM: tuple[tuple[Any, ScalarType, int], ...] = ((AtomicRMWMode.ADDF, BF16, 90),)


OPS: tuple[OpDef, ...] = (
    # ---- floating-point math -------------------------------------------------------
    _unary_f("absf", 0x00),
    _binary_f("addf", 0x02, _ROUND, _UNIT_FTZ, fmt_mid=f"%rounding($rounding_mode) {_FTZ}"),
    _binary_f("atan2", 0x6E, a="x", b="y", since=V13_2),
    _unary_f("ceil", 0x0D),
    _unary_f("cos", 0x12),
    _unary_f("cosh", 0x13),
    _binary_f("divf", 0x14, _ROUND, _UNIT_FTZ, fmt_mid=f"%rounding($rounding_mode) {_FTZ}"),
    _unary_f("exp", 0x17, A("rounding_mode", K.ENUM, RoundingMode, default=RoundingMode.FULL, since=V13_3),
             fmt_mid="%rounding_unless_full($rounding_mode)"),
    _unary_f("exp2", 0x18, _UNIT_FTZ, fmt_mid=_FTZ),
    _unary_f("floor", 0x27),
    OpDef("fma", 0x28, V13_1, (O("lhs", "base_float_tile"), O("rhs", "base_float_tile"), O("acc", "base_float_tile")),
          (_ROUND, _UNIT_FTZ), (R("result", "base_float_tile", infer="same:lhs"),),
          same=(("lhs", "rhs", "acc", "result"),), pure=True,
          fmt=f"$lhs `,` $rhs `,` $acc %rounding($rounding_mode) {_FTZ} {_TY}"),
    _unary_f("log", 0x3F),
    _unary_f("log2", 0x40),
    _binary_f("maxf", 0x45, A("propagate_nan", K.UNIT), _UNIT_FTZ,
              fmt_mid="(`flush_to_zero` $flush_to_zero^)? (`propagate_nan` $propagate_nan^)?"),
    _binary_f("minf", 0x47, A("propagate_nan", K.UNIT), _UNIT_FTZ,
              fmt_mid="(`flush_to_zero` $flush_to_zero^)? (`propagate_nan` $propagate_nan^)?"),
    _binary_f("mulf", 0x4C, _ROUND, _UNIT_FTZ, fmt_mid=f"%rounding($rounding_mode) {_FTZ}"),
    _unary_f("negf", 0x4F),
    _binary_f("fpowf", 0x54, a="source", b="exponent"),
    _binary_f("remf", 0x59),
    _unary_f("rsqrt", 0x5D, _UNIT_FTZ, fmt_mid=_FTZ),
    _unary_f("sin", 0x62),
    _unary_f("sinh", 0x63),
    _unary_f("sqrt", 0x64, _ROUND, _UNIT_FTZ, fmt_mid=f"%rounding($rounding_mode) {_FTZ}"),
    _binary_f("subf", 0x67, _ROUND, _UNIT_FTZ, fmt_mid=f"%rounding($rounding_mode) {_FTZ}"),
    _unary_f("tan", 0x69),
    _unary_f("tanh", 0x6A, A("rounding_mode", K.ENUM, RoundingMode, default=RoundingMode.FULL, since=V13_2),
             fmt_mid="%rounding_unless_full($rounding_mode)"),
    OpDef("fpowi", 0x79, V13_4, (O("source", "base_float_tile"), O("exponent", "int_tile")), (),
          (R("result", "base_float_tile", infer="same:source"),), same=(("source", "result"),), pure=True,
          fmt="$source `,` $exponent attr-dict `:` type($source) `,` type($exponent)",
          check=V.same_shape("source", "exponent")),
    # ---- integer math and bits -----------------------------------------------------
    OpDef("absi", 0x01, V13_1, (O("source", "int_tile"),), (), (R("result", "int_tile", infer="same:source"),),
          same=(("source", "result"),), pure=True, fmt=f"$source {_TY}"),
    _binary_i("addi", 0x03, _OVERFLOW, fmt_mid=_OVF),
    _binary_i("andi", 0x04),
    _binary_i("divi", 0x15, _SIGN, A("rounding", K.ENUM, RoundingMode, default=RoundingMode.ZERO),
              fmt_mid="%signedness($signedness) (`rounding` `` $rounding^)?", pure=False),
    _binary_i("maxi", 0x46, _SIGN, fmt_mid="%signedness($signedness)"),
    _binary_i("mini", 0x48, _SIGN, fmt_mid="%signedness($signedness)"),
    _binary_i("muli", 0x4E, _OVERFLOW, fmt_mid=_OVF),
    _binary_i("mulhii", 0x4D, a="x", b="y"),
    OpDef("negi", 0x50, V13_1, (O("source", "int_tile"),),
          (A("overflow", K.ENUM, IntegerOverflow, default=IntegerOverflow.NONE, since=V13_2),),
          (R("result", "int_tile", infer="same:source"),), same=(("source", "result"),), pure=True,
          fmt=f"$source {_OVF} {_TY}"),
    _binary_i("ori", 0x52),
    _binary_i("remi", 0x5A, _SIGN, fmt_mid="%signedness($signedness)"),
    _binary_i("shli", 0x60, _OVERFLOW, fmt_mid=_OVF),
    _binary_i("shri", 0x61, _SIGN, fmt_mid="%signedness($signedness)"),
    _binary_i("subi", 0x68, _OVERFLOW, fmt_mid=_OVF),
    _binary_i("xori", 0x6C),
    # ---- comparisons and select ----------------------------------------------------
    OpDef("cmpf", 0x0E, V13_1, (O("lhs", "base_float_tile"), O("rhs", "base_float_tile")),
          (A("comparison_predicate", K.ENUM, ComparisonPredicate),
           A("comparison_ordering", K.ENUM, ComparisonOrdering)),
          (R("result", "i1_tile", infer="i1:lhs"),), same=(("lhs", "rhs"),), pure=True,
          fmt="$comparison_predicate $comparison_ordering $lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)"),
    OpDef("cmpi", 0x0F, V13_1, (O("lhs", "int_tile"), O("rhs", "int_tile")),
          (A("comparison_predicate", K.ENUM, ComparisonPredicate), _SIGN),
          (R("result", "i1_tile", infer="i1:lhs"),), same=(("lhs", "rhs"),), pure=True,
          fmt="$comparison_predicate $lhs `,` $rhs `,` %signedness($signedness) attr-dict `:` type($lhs) `->` type($result)"),
    OpDef("select", 0x5F, V13_1, (O("cond", "i1_tile"), O("val_if_true"), O("val_if_false")), (),
          (R("result", infer="same:val_if_true"),), same=(("val_if_true", "val_if_false", "result"),), pure=True,
          fmt="$cond `,` $val_if_true `,` $val_if_false attr-dict `:` type($cond) `,` type($result)",
          check=V.same_shape("cond", "val_if_true")),
    # ---- conversions ---------------------------------------------------------------
    _cast("bitcast", 0x09, "number_tile", "number_tile", check=V.check_bitcast),
    OpDef("exti", 0x25, V13_1, (O("from", "int4_tile"),), (_SIGN,), (R("to", "int4_tile"),), pure=True,
          fmt=f"$from %signedness($signedness) {_CONV}", check=V.check_exti),
    OpDef("ftof", 0x2A, V13_1, (O("from", "float_tile"),),
          (A("rounding_mode", K.ENUM, RoundingMode, default=RoundingMode.NEAREST_EVEN),),
          (R("to", "float_tile"),), pure=True, fmt=f"$from %rounding($rounding_mode) {_CONV}",
          check=V.same_shape("from", "to")),
    OpDef("ftoi", 0x2B, V13_1, (O("from", "float_tile"),),
          (_SIGN, _ROUND, A("saturating", K.UNIT, since=V13_4)), (R("to", "int_tile"),), pure=True,
          fmt=f"$from %signedness($signedness) %int_rounding($rounding_mode) (`saturating` $saturating^)? {_CONV}",
          check=V.same_shape("from", "to")),
    _cast("int_to_ptr", 0x33, "i64_tile", "ptr_tile", check=V.same_shape("source", "result")),
    OpDef("itof", 0x3B, V13_1, (O("from", "int_tile"),), (_SIGN, _ROUND), (R("to", "float_tile"),), pure=True,
          fmt=f"$from %signedness($signedness) %rounding($rounding_mode) {_CONV}", check=V.same_shape("from", "to")),
    _cast("pack", 0x6F, "number4_tile", "i8_tile", since=V13_3, check=V.check_pack),
    _cast("ptr_to_int", 0x56, "ptr_tile", "i64_tile", check=V.same_shape("source", "result")),
    _cast("ptr_to_ptr", 0x57, "ptr_tile", "ptr_tile", check=V.same_shape("source", "result")),
    OpDef("trunci", 0x6B, V13_1, (O("from", "int4_tile"),), (_OVERFLOW,), (R("to", "int4_tile"),), pure=True,
          fmt=f"$from {_OVF} {_CONV}", check=V.check_trunci),
    _cast("unpack", 0x70, "i8_tile", "number4_tile", since=V13_3, check=V.check_pack),
    # ---- shapes and constants --------------------------------------------------------
    _cast("broadcast", 0x0B, "tile", "tile", asm_name="bcast", check=V.check_broadcast),
    OpDef("cat", 0x0C, V13_1, (O("lhs"), O("rhs")), (A("dim", K.INT),), (R("result"),), pure=True,
          fmt="$lhs `,` $rhs `dim` `=` $dim attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)",
          check=V.check_cat),
    OpDef("constant", 0x10, V13_1, (), (A("value", K.DENSE),), (R("result", "number_tile", infer="value"),),
          pure=True, fmt=Printer.op_constant, check=V.check_constant, asm_name=P.constant_name),
    OpDef("extract", 0x26, V13_1, (O("source"), O("indices", "scalar_i32", VAR)), (), (R("result"),), pure=True,
          fmt="$source `[` $indices `]` attr-dict `:` type($source) `->` type($result)",
          check=V.check_index_count("source", "indices")),
    OpDef("insert", 0x76, V13_4, (O("source"), O("destination"), O("indices", "scalar_i32", VAR)), (),
          (R("result", infer="same:destination"),), same=(("destination", "result"),), pure=True,
          fmt="$source `,` $destination `[` $indices `]` attr-dict `:` type($source) `,` type($destination)",
          check=V.check_index_count("destination", "indices")),
    OpDef("iota", 0x3A, V13_1, (), (), (R("result", "int_tile"),), pure=True, fmt=_TY, check=V.check_iota),
    OpDef("offset", 0x51, V13_1, (O("ptr", "ptr_tile"), O("offset", "int_tile")), (),
          (R("result", "ptr_tile", infer="same:ptr"),), same=(("ptr", "result"),), pure=True,
          fmt="$ptr `,` $offset attr-dict `:` type($ptr) `,` type($offset) `->` type($result)",
          check=V.same_shape("ptr", "offset")),
    OpDef("permute", 0x53, V13_1, (O("source"),), (A("permutation", K.I32_ARRAY),), (R("result"),), pure=True,
          fmt=f"$source $permutation {_CAST}", check=V.check_permute),
    _cast("reshape", 0x5B, "tile", "tile", asm_name="reshape", check=V.check_reshape),
    # ---- compute ---------------------------------------------------------------------
    OpDef("mmaf", 0x49, V13_1, (O("lhs", "mma_operand"), O("rhs", "mma_operand"), O("acc", "mma_result")),
          (A("fast_acc", K.UNIT, since=V13_3),), (R("result", "mma_result", infer="same:acc"),),
          same=(("acc", "result"),), pure=True,
          fmt="$lhs `,` $rhs `,` $acc (`fast_acc` $fast_acc^)? attr-dict `:` type($lhs) `,` type($rhs) `,` type($acc)",
          check=V.check_mma(same_elements=True)),
    OpDef("mmaf_scaled", 0x72, V13_3,
          (O("lhs", "mma_scaled_operand"), O("rhs", "mma_scaled_operand"), O("acc", "f32_tile"),
           O("lhs_scale", "mma_scale"), O("rhs_scale", "mma_scale")), (), (R("result", "f32_tile", infer="same:acc"),),
          same=(("acc", "result"),), pure=True,
          fmt="$lhs `,` $rhs `,` $acc `,` $lhs_scale `,` $rhs_scale attr-dict `:` type($lhs) `,` type($rhs) `,` "
              "type($acc) `,` type($lhs_scale) `,` type($rhs_scale)", min_sm=100),
    OpDef("mmai", 0x4A, V13_1, (O("lhs", "i8_tile"), O("rhs", "i8_tile"), O("acc", "i32_tile")),
          (A("signedness_lhs", K.ENUM, Signedness), A("signedness_rhs", K.ENUM, Signedness)),
          (R("result", "i32_tile", infer="same:acc"),), same=(("acc", "result"),), pure=True,
          fmt="$lhs `,` $rhs `,` $acc %signedness($signedness_lhs) %signedness($signedness_rhs) attr-dict `:` "
              "type($lhs) `,` type($rhs) `,` type($acc)", check=V.check_mma(same_elements=False)),
    OpDef("reduce", 0x58, V13_1, (O("operands", "tile", VAR),),
          (A("dim", K.INT), A("identities", K.ATTR_ARRAY)), (R("results", "tile", variadic=True),),
          regions=("body",), fmt=Printer.op_reduce, asm_name="reduce",
          check=V.check_reduce, region_rule=_REDUCE_REGION),
    OpDef("scan", 0x5E, V13_1, (O("operands", "tile", VAR),),
          (A("dim", K.INT), A("reverse", K.BOOL), A("identities", K.ATTR_ARRAY)),
          (R("results", "tile", variadic=True),), regions=("body",), fmt=Printer.op_scan, asm_name="",
          check=V.check_reduce, region_rule=_SCAN_REGION),
    # ---- control flow ----------------------------------------------------------------
    OpDef("assert", 0x05, V13_1, (O("condition", "i1_tile"),), (A("message", K.STR),),
          fmt="$condition `,` $message attr-dict `:` type($condition)"),
    _terminator("break", 0x0A, ("if", "loop")),
    _terminator("continue", 0x11, ("for", "if", "loop"), elided_when_empty=True),
    OpDef("for", 0x29, V13_1,
          (O("lowerBound", "scalar_int"), O("upperBound", "scalar_int"), O("step", "scalar_int"),
           O("initValues", "any", VAR)), (A("unsignedCmp", K.UNIT, since=V13_2),),
          (R("resultValues", "any", variadic=True),), regions=("region",),
          same=(("lowerBound", "upperBound", "step"),), fmt=Printer.op_for, asm_name="for", region_rule=_FOR_REGION),
    OpDef("if", 0x32, V13_1, (O("condition", "scalar_i1"),), (), (R("results", "any", variadic=True),),
          regions=("thenRegion", "elseRegion"), fmt=Printer.op_if, asm_name="", region_rule=_IF_REGION),
    OpDef("loop", 0x41, V13_1, (O("initValues", "any", VAR),), (), (R("resultValues", "any", variadic=True),),
          regions=("region",), fmt=Printer.op_loop, asm_name="", region_rule=_LOOP_REGION),
    _terminator("return", 0x5C, ("entry",)),
    _terminator("yield", 0x6D, ("if", "reduce", "scan"), pure=True, elided_when_empty=True),
    # ---- grid ------------------------------------------------------------------------
    OpDef("get_num_tile_blocks", 0x2E, V13_1, (), (),
          tuple(R(f"gridSize_{c}", "scalar_i32", infer="scalar_i32") for c in "xyz"), pure=True,
          fmt="attr-dict `:` type($gridSize_x)"),
    OpDef("get_tile_block_id", 0x30, V13_1, (), (),
          tuple(R(f"blockId_{c}", "scalar_i32", infer="scalar_i32") for c in "xyz"), pure=True,
          fmt="attr-dict `:` type($blockId_x)"),
    # ---- views -----------------------------------------------------------------------
    OpDef("get_index_space_shape", 0x2D, V13_1, (O("src", "view"),), (),
          (R("result", "scalar_int", variadic=True),), fmt=Printer.op_shape_query, check=V.check_shape_query),
    OpDef("get_tensor_shape", 0x2F, V13_1, (O("src", "tensor_view"),), (),
          (R("result", "scalar_int", variadic=True),), fmt=Printer.op_shape_query, check=V.check_shape_query),
    OpDef("make_gather_scatter_view", 0x73, V13_3, (O("tensor_view", "tensor_view"),), (),
          (R("result", "gather_view"),), pure=True, fmt=Printer.op_make_view, asm_name="gsview",
          check=V.check_make_view),
    OpDef("make_partition_view", 0x42, V13_1, (O("tensor_view", "tensor_view"),), (),
          (R("result", "partition_view"),), pure=True, fmt=Printer.op_make_view, asm_name="pview",
          check=V.check_make_view),
    OpDef("make_strided_view", 0x74, V13_3, (O("tensor_view", "tensor_view"),), (),
          (R("result", "strided_view"),), pure=True, fmt=Printer.op_make_view, asm_name="sview",
          check=V.check_make_view),
    OpDef("make_tensor_view", 0x43, V13_1,
          (O("base", "scalar_ptr"), O("dynamicShape", "scalar_int", VAR), O("dynamicStrides", "scalar_int", VAR)),
          (), (R("result", "tensor_view"),), segmented=True, fmt=Printer.op_make_tensor_view,
          asm_name="tview", check=V.check_make_tensor_view),
    # ---- memory ----------------------------------------------------------------------
    OpDef("alloca", 0x71, V13_3, (), (A("num_elem", K.INT), A("alignment", K.INT), A("global", K.UNIT, since=V13_3)),
          (R("result", "scalar_ptr"),),
          fmt="`num_elem` `=` $num_elem `,` `alignment` `=` $alignment (`global` $global^)? attr-dict `:` type($result)",
          check=V.check_alloca),
    OpDef("atomic_cas_tko", 0x07, V13_1,
          (O("pointers", "ptr_tile"), O("cmp"), O("val"), O("mask", "i1_tile", OPT), O("token", "token", OPT)),
          (_ORDERING, A("memory_scope", K.ENUM, MemoryScope)),
          (R("result", infer="same:val"), R("result_token", "token", infer="token")),
          segmented=True, same=(("cmp", "val", "result"),),
          fmt="$memory_ordering_semantics $memory_scope $pointers `,` $cmp `,` $val (`,` $mask^)? "
              "(`token` `` `=` `` $token^)? attr-dict `:` type($pointers) `,` type($val) (`,` type($mask)^)? "
              "`->` type($result) `,` type($result_token)",
          check=V.check_ptr_access("pointers", "val"), elements=ElementRule("val", None, ((None, _CAS_ELEMENTS),))),
    OpDef("atomic_red_view_tko", 0x75, V13_3,
          (O("view", "view"), O("index", "scalar_int", VAR), O("value"), O("token", "token", OPT)),
          (_ORDERING, A("memory_scope", K.ENUM, MemoryScope), A("mode", K.ENUM, AtomicRMWMode)),
          (R("result_token", "token", infer="token"),), segmented=True, fmt=Printer.op_atomic_red_view,
          check=V.all_of(V.check_index_count("view", "index"), V.check_unpadded_view),
          elements=ElementRule("value", "mode", _REDUCTION_ELEMENTS, _ATOMIC_MIN_SM)),
    OpDef("atomic_rmw_tko", 0x08, V13_1,
          (O("pointers", "ptr_tile"), O("arg"), O("mask", "i1_tile", OPT), O("token", "token", OPT)),
          (_ORDERING, A("memory_scope", K.ENUM, MemoryScope), A("mode", K.ENUM, AtomicRMWMode)),
          (R("result", infer="same:arg"), R("result_token", "token", infer="token")),
          segmented=True, same=(("arg", "result"),),
          fmt="$memory_ordering_semantics $memory_scope $pointers `,` $mode `,` $arg (`,` $mask^)? "
              "(`token` `` `=` `` $token^)? attr-dict `:` type($pointers) `,` type($arg) (`,` type($mask)^)? "
              "`->` type($result) `,` type($result_token)",
          check=V.check_ptr_access("pointers", "arg"), elements=ElementRule("arg", "mode", _RMW_ELEMENTS, _ATOMIC_MIN_SM)),
    OpDef("get_global", 0x2C, V13_1, (), (A("name", K.SYMREF),), (R("result", "scalar_ptr"),), pure=True,
          fmt="$name attr-dict `:` type($result)"),
    OpDef("global", 0x31, V13_1, (),
          (A("sym_name", K.STR), A("value", K.DENSE), A("alignment", K.INT, default=0),
           A("constant", K.UNIT, since=V13_3),
           A("symbol_visibility", K.ENUM, SymbolVisibility, default=SymbolVisibility.PUBLIC, since=V13_3)),
          structural=True, fmt=Printer.op_structural),
    OpDef("join_tokens", 0x3C, V13_1, (O("tokens", "token", VAR),), (), (R("result", "token", infer="token"),),
          pure=True, fmt="$tokens attr-dict `:` type($result)"),
    OpDef("load_ptr_tko", 0x3D, V13_1,
          (O("source", "ptr_tile"), O("mask", "i1_tile", OPT), O("paddingValue", "number_tile", OPT),
           O("token", "token", OPT)),
          (_ORDERING, _SCOPE_OPT, _HINTS), (R("result", infer="pointee:source"), R("result_token", "token", infer="token")),
          segmented=True,
          fmt="$memory_ordering_semantics ($memory_scope^)? $source (`,` $mask^)? (`,` $paddingValue^)? "
              "(`token` `` `=` `` $token^)? (`optimization_hints` `=` $optimization_hints^)? attr-dict `:` "
              "type($source) (`,` type($mask)^)? (`,` type($paddingValue)^)? `->` type($result) `,` "
              "type($result_token)", check=V.check_ptr_access("source", "result")),
    OpDef("load_view_tko", 0x3E, V13_1,
          (O("view", "view"), O("index", "scalar_int", VAR), O("token", "token", OPT)),
          (_ORDERING, _SCOPE_OPT, _HINTS, _INBOUNDS),
          (R("tile", infer="view_tile:view"), R("result_token", "token", infer="token")), segmented=True,
          fmt=Printer.op_load_view, check=V.check_view_tile("tile")),
    OpDef("make_token", 0x44, V13_1, (), (), (R("result", "token", infer="token"),), pure=True,
          fmt="attr-dict `:` type($result)"),
    OpDef("memory_fence_alias_tko", 0x7A, V13_4, (O("token", "token"),), (),
          (R("result_token", "token", infer="token"),), fmt="$token attr-dict"),
    OpDef("gdc_launch_dependents_tko", 0x77, V13_4, (O("token", "token", OPT),), (),
          (R("result_token", "token", infer="token"),),
          fmt="(`token` `=` $token^)? attr-dict `->` type($result_token)"),
    OpDef("gdc_wait_tko", 0x78, V13_4, (O("token", "token", OPT),), (),
          (R("result_token", "token", infer="token"),),
          fmt="(`token` `=` $token^)? attr-dict `->` type($result_token)"),
    OpDef("store_ptr_tko", 0x65, V13_1,
          (O("destination", "ptr_tile"), O("value"), O("mask", "i1_tile", OPT), O("token", "token", OPT)),
          (_ORDERING, _SCOPE_OPT, _HINTS), (R("result_token", "token", infer="token"),), segmented=True,
          fmt="$memory_ordering_semantics ($memory_scope^)? $destination `,` $value (`,` $mask^)? "
              "(`token` `` `=` `` $token^)? (`optimization_hints` `=` $optimization_hints^)? attr-dict `:` "
              "type($destination) `,` type($value) (`,` type($mask)^)? `->` type($result_token)",
          check=V.check_ptr_access("destination", "value")),
    OpDef("store_view_tko", 0x66, V13_1,
          (O("tile"), O("view", "view"), O("index", "scalar_int", VAR), O("token", "token", OPT)),
          (_ORDERING, _SCOPE_OPT, _HINTS, _INBOUNDS), (R("result_token", "token", infer="token"),),
          segmented=True, fmt=Printer.op_store_view, check=V.check_view_tile("tile")),
    # ---- misc ------------------------------------------------------------------------
    OpDef("assume", 0x06, V13_1, (O("value", "any"),), (A("predicate", K.PREDICATE),),
          (R("result", "any", infer="same:value"),), same=(("value", "result"),),
          fmt="$predicate `,` $value attr-dict `:` type($value)", check=V.check_assume, asm_name=P.assume_name),
    OpDef("print_tko", 0x55, V13_1, (O("args", "tile", VAR), O("token", "token", OPT, since=V13_2)),
          (A("str", K.STR),), (R("result_token", "token", since=V13_2, infer="token"),), segmented=True,
          fmt="$str (`,` $args^)? (`token` `` `=` `` $token^)? attr-dict (`:` type($args)^)? `->` "
              "type($result_token)"),
    # ---- structure ---------------------------------------------------------------------
    OpDef("entry", 0x16, V13_1, (), (A("sym_name", K.STR), A("function_type", K.STR),
                                    A("optimization_hints", K.HINTS, optional=True)),
          regions=("body",), structural=True, fmt=Printer.op_structural),
    OpDef("module", 0x4B, V13_1, (), (A("sym_name", K.STR), A("producer", K.STR, optional=True, since=V13_3)),
          regions=("body",), structural=True, fmt=Printer.op_structural),
)

OPS_BY_NAME: dict[str, OpDef] = {op.name: op for op in OPS}
OPS_BY_OPCODE: dict[int, OpDef] = {op.opcode: op for op in OPS}
assert len(OPS_BY_NAME) == len(OPS) and len(OPS_BY_OPCODE) == len(OPS), "duplicate op name or opcode"


def register_op(op: OpDef) -> OpDef:
    """Add an op to the table at run time (a new opcode of a later version, or a test op):
    builder, verifier, printer, writer and reader then handle it with no other code.
    (`OPS` stays the built-in table; `OPS_BY_NAME` and `OPS_BY_OPCODE` hold every op.)"""
    if op.name in OPS_BY_NAME or op.opcode in OPS_BY_OPCODE:
        raise ValueError(f"op {op.name!r} or opcode {op.opcode:#x} is already in the table")
    OPS_BY_NAME[op.name] = op
    OPS_BY_OPCODE[op.opcode] = op
    return op


def unregister_op(name: str) -> None:
    """Remove an op added by :func:`register_op`."""
    op = OPS_BY_NAME.pop(name)
    del OPS_BY_OPCODE[op.opcode]


def bool_array(values: Any) -> tuple[bool, ...]:
    """A BOOL_ARRAY attribute value in its one spelling: ``()`` when no entry is set."""
    vals = tuple(bool(v) for v in values)
    return vals if any(vals) else ()


#: Older spellings: cuda-tile 13.3's ODS calls fpowf "pow"; tileirdisasm 13.4 prints "fpowf".
ALIASES = {"pow": "fpowf"}


def ops_in(version: Version) -> list[OpDef]:
    """The ops of Tile IR that the given bytecode version has (registered ones included), in opcode order."""
    return sorted((op for op in OPS_BY_NAME.values() if op.since <= version), key=lambda o: o.opcode)


def get_op(name: str) -> OpDef:
    """The table record of an op by mnemonic (``"addf"``, ``"cuda_tile.addf"``)."""
    key = name.removeprefix("cuda_tile.")
    key = ALIASES.get(key, key)
    try:
        return OPS_BY_NAME[key]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(key, OPS_BY_NAME, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise IRError(f"unknown Tile IR op {name!r}{hint}") from None


def accepted_element_types(op: str, mode: Any = None) -> frozenset[ScalarType]:
    """The element types op ``op`` accepts, from its record's :class:`ElementRule`: for an
    op whose types depend on an attribute (an atomic's ``mode``), those of ``mode`` (a
    member of the attribute's enum or its MLIR spelling, ``"addf"``); empty when that
    value takes none (a view reduction's ``"xchg"``). Raises :class:`IRError` for an op
    without an element rule and for a mode the op does not have."""
    d = get_op(op)
    rule = d.elements
    if rule is None:
        raise IRError(f"'{d.name}' has no element-type rule (its operand constraints say what it takes)")
    if rule.by_attr is None:
        if mode is not None:
            raise IRError(f"'{d.name}' takes one set of element types, not one per mode; found mode {mode!r}")
        return rule.elements() or frozenset()
    attr = d.attr(rule.by_attr)
    enum_ = attr.enum if attr is not None else None
    value = next((m for m in enum_ or () if m is mode or getattr(m, "text", None) == mode), None)
    if value is None:
        choices = ", ".join(str(getattr(m, "text", m.name)) for m in enum_ or ())
        raise IRError(f"'{d.name}': {rule.by_attr} must be one of {choices}, found {mode!r}")
    return rule.elements(value) or frozenset()


__all__ = ["OPS", "OpDef", "OperandDef", "AttrDef", "ResultDef", "Arity", "AttrKind", "RegionRule", "ElementRule",
           "accepted_element_types", "get_op", "ops_in"]


@dataclass(frozen=True)
class Layout:
    """How one op is laid out in bytecode of one version (derived from the record, cached)."""

    opdef: OpDef
    variadic: bool
    result_written: tuple[bool, ...]       # per ResultDef: present in this version
    flag_names: tuple[tuple[str, bool, Version], ...]  # (name, is_attr, since) by bit
    has_flags: bool
    attrs: tuple[tuple[AttrDef, str], ...]  # (def, mode): unit / optional / required / default
    segmented: bool
    arities: tuple[Arity, ...]
    count_all: bool
    n_fixed: int


_LAYOUTS: dict[tuple[int, Version], Layout] = {}


def layout(op: OpDef, version: Version) -> Layout:
    """The cached :class:`Layout` of ``op`` at ``version``."""
    key = (op.opcode, version)
    lay = _LAYOUTS.get(key)
    if lay is None or lay.opdef is not op:  # another OpDef may have had this opcode (unregister_op)
        attrs = []
        for a in op.attrs:
            if a.kind is AttrKind.UNIT:
                mode = "unit"
            elif a.optional:
                mode = "optional"
            elif a.since > version:
                mode = "default"
            else:
                mode = "required"
            attrs.append((a, mode))
        lay = Layout(
            op, op.variadic, tuple(r.since <= version for r in op.results),
            tuple((n, is_attr, v) for n, v, is_attr in op.flag_fields()), op.has_flags(version),
            tuple(attrs), op.segmented, tuple(o.arity for o in op.operands), op.count_all_operands,
            sum(1 for o in op.operands if o.arity is Arity.ONE),
        )
        _LAYOUTS[key] = lay
    return lay
