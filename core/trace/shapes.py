"""What record_shapes=True adds to an op: its inputs' shapes and element types, read into an op's signature
('aten::mul [1, 32, 1, 64] bf16, ...', for the fusion what-if) and its largest tensor input in bytes."""

import math
import re

from core.trace.fields import shown_text

# record_shapes' element types: the short name `op_signature` writes (a type without one keeps its own name) and
# the bytes of one element. A Float8 type (c10::Float8_e4m3fn, ...) is one byte.
ELEMENT_TYPES = {
    "c10::BFloat16": ("bf16", 2),
    "c10::Half": ("f16", 2),
    "float": ("f32", 4),
    "double": ("f64", 8),
    "long int": ("i64", 8),
    "int": ("i32", 4),
    "bool": ("bool", 1),
    "short int": ("short int", 2),
    "signed char": ("signed char", 1),
    "unsigned char": ("unsigned char", 1),
    "c10::complex<float>": ("c10::complex<float>", 8),
    "c10::complex<double>": ("c10::complex<double>", 16),
}


def op_signature(name: str, dims, types) -> str:
    """'aten::mul [1, 32, 1, 64] bf16, [1, 1, 1, 64] bf16': an op and its inputs' shapes and types as record_shapes
    wrote them (a scalar or a list of tensors as 'scalar', 'list'), at most 400 characters. `op_inputs` reads it back."""
    parts = []
    for shape, kind in zip(dims if isinstance(dims, list) else (), types if isinstance(types, list) else ()):
        if isinstance(shape, list) and shape and all(type(d) is int and 0 <= d < 2**40 for d in shape):
            kind = (
                (ELEMENT_TYPES[kind][0] if kind in ELEMENT_TYPES else kind) if isinstance(kind, str) else "?"
            )
            parts.append(f"[{', '.join(map(str, shape))}] {shown_text(kind, 40)}")
        else:
            parts.append("list" if isinstance(shape, list) and shape else "scalar")
    return shown_text(f"{name} {', '.join(parts)}".strip(), 400)


_INPUT = re.compile(r"\[([\d, ]*)\] ([^\s,]+)|(scalar|list)")


def op_inputs(signature: str) -> tuple[str, list[tuple[tuple[int, ...], str] | None]]:
    """(op name, [(shape, short dtype), or None for a scalar or a list, per input]) of an `op_signature`."""
    name, _, rest = signature.partition(" ")
    inputs = []
    for m in _INPUT.finditer(rest):
        if m.group(3):
            inputs.append(None)
        else:
            inputs.append((tuple(int(d) for d in m.group(1).split(",") if d.strip()), m.group(2)))
    return name, inputs


def largest_tensor_bytes(dims, types, skip_first: bool = False) -> int:
    """The largest tensor input of an op, in bytes, from record_shapes' 'Input Dims' / 'Input type'."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return 0
    best = 0
    for k, (shape, kind) in enumerate(zip(dims, types)):
        if skip_first and k == 0:
            continue
        if not isinstance(shape, list) or not shape or not isinstance(kind, str):
            continue
        size = ELEMENT_TYPES[kind][1] if kind in ELEMENT_TYPES else 1 if kind.startswith("c10::Float8") else 0
        if size and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape):
            best = max(best, size * math.prod(shape))
    return min(best, 2**62)
