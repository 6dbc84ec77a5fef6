"""The probe's Triton kernels launched for what an engine's eager path pays a launch: bound once per shape.

`kernel[grid](*args, **meta)` (Triton 3.6, `JITFunction.run`) does on every call: bind the arguments with
a generated binder, specialise each one (its dtype, a pointer's 16-byte alignment, an integer equal to 1
or divisible by 16), turn that and the options into a cache key, look the compiled kernel up, build its
launch metadata, call the (empty) launch hooks, and hand the compiled kernel's launcher the current stream
and every argument, the launcher asking the driver about each pointer. For a kernel launched many times a
step at the same shapes all of it but the launch is the same every time.

`Launch` is one kernel at one specialisation: the grid and every argument fixed except the tensors it is
called with (`slots`). Its first call goes through `kernel[grid]`, which compiles where needed and returns
the compiled kernel; later calls give that kernel's launcher the current stream (asked for each call: a
graph capture runs on a side stream) and the full argument list in signature order, constexprs included,
the tensors as their addresses (which the launcher takes as they are). Same compiled kernel, same grid,
same arguments: the same launch. `kernel[grid]` is used instead, every time, under Triton's interpreter
(TRITON_INTERPRET=1: the CPU tests), with a Triton other than the one read (`TRITON_READ`), with launch
hooks installed (Triton's profiler), for a tensor not 16-byte aligned (the compiled kernel assumed it
was), or after `set_bound(False)` (the benchmark's side by side; PROBE_PLAIN_LAUNCH=1 starts that way).

A caller keeps one plan per key (`remember`): the key must determine every argument but the tensors, the
tensors' dtypes and the device. With `VERIFY` on (the tests) every call builds its plan afresh and checks
it against the kept one, so a key that misses something fails a test rather than launching stale
arguments.
"""

from __future__ import annotations

import os

import torch
import triton

TRITON_READ = "3.6"  # the Triton whose JITFunction.run and CUDA launcher this module was written against
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
VERIFY = False  # tests: rebuild every plan and compare it with the kept one
_bound_on = os.environ.get("PROBE_PLAIN_LAUNCH") != "1"


def _hook_chains():
    """Triton's launch hook chains, where they are lists of hooks as in 3.6 (else None: never bind)."""
    try:
        from triton import knobs

        chains = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    except (ImportError, AttributeError):
        return None
    return chains if all(isinstance(getattr(c, "calls", None), list) for c in chains) else None


_HOOKS = _hook_chains()
# The chains' own lists (HookChain.add and .remove change them in place): read on every bound launch.
_ENTER_CALLS, _EXIT_CALLS = (_HOOKS[0].calls, _HOOKS[1].calls) if _HOOKS else ([], [])
_SUPPORTED = (
    not INTERPRETED
    and _HOOKS is not None
    and triton.__version__.split(".")[:2] == TRITON_READ.split(".")
    and hasattr(torch._C, "_cuda_getCurrentRawStream")
)
_raw_stream = getattr(
    torch._C, "_cuda_getCurrentRawStream", None
)  # device index -> the current stream's handle
_data_ptr = torch.Tensor.data_ptr
_low_bits = (15).__and__  # a pointer's offset from a 16-byte boundary


def _current_device() -> int:
    return torch.cuda.current_device()


def set_bound(on: bool) -> bool:
    """Launch through the bound launchers (True) or `kernel[grid]` every time (False); returns the previous."""
    global _bound_on
    previous, _bound_on = _bound_on, bool(on)
    return previous


def bound_available() -> bool:
    """Whether this process can bind launches at all (CUDA, the Triton read, no interpreter)."""
    return _SUPPORTED


def _hooks_quiet() -> bool:
    return not (_ENTER_CALLS or _EXIT_CALLS)


def empty_template(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """A one-element tensor seen as `shape`: `torch.empty_like` of it is a new contiguous tensor of that shape,
    dtype and device, allocated for about half what `torch.empty(shape, dtype=, device=)` costs the host."""
    return torch.empty(1, dtype=dtype, device=device).expand(*shape)


class Launch:
    """`kernel[grid](*args, **meta)` with the tensors passed to a call placed at `slots` of `args`.

    args: the positional arguments (anything at a slot is replaced); meta: constexprs and options by name.
    bind=False: always `kernel[grid]` (one-off launches: sweeps and overridden configs)."""

    __slots__ = ("kernel", "grid", "args", "meta", "slots", "compiled", "_go", "_try_bind")

    def __init__(self, kernel, grid, args, meta: dict | None = None, slots=(), bind: bool = True):
        self.kernel = kernel
        self.grid = tuple(int(g) for g in grid)
        self.slots = tuple(slots)
        self.args = tuple(None if i in self.slots else a for i, a in enumerate(args))
        self.meta = dict(meta or {})
        self.compiled = None  # the compiled kernel the bound launcher launches
        self._go = None
        self._try_bind = bind and _SUPPORTED

    @property
    def bound(self) -> bool:
        """Whether calls go through the bound launcher (while `set_bound(True)` and no launch hook)."""
        return self._go is not None

    def __call__(self, *tensors) -> None:
        go = self._go
        if go is not None and _bound_on and not (_ENTER_CALLS or _EXIT_CALLS):
            ptrs = tuple(map(_data_ptr, tensors))
            if not any(map(_low_bits, ptrs)):
                go(ptrs)
                return
        self.plain(*tensors)

    def plain(self, *tensors):
        """Through `kernel[grid]`; binds on the first call. Returns what `kernel[grid]` returns."""
        args = list(self.args)
        for slot, tensor in zip(self.slots, tensors):
            args[slot] = tensor
        compiled = self.kernel[self.grid](*args, **self.meta)
        if self._try_bind:
            self._try_bind = False
            self._go = _bind(self, compiled, tensors)
            if self._go is not None:
                self.compiled = compiled
        return compiled

    def describe(self) -> tuple:
        """What the launch depends on, comparable between two plans (`VERIFY`)."""
        return (
            getattr(self.kernel, "__name__", repr(self.kernel)),
            self.grid,
            tuple(_comparable(a) for a in self.args),
            tuple(sorted((k, _comparable(v)) for k, v in self.meta.items())),
            self.slots,
        )


def _comparable(value):
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            tuple(value.shape),
            tuple(value.stride()),
            value.dtype,
            value.device,
            value.data_ptr(),
        )
    return value


def _bind(launch: Launch, compiled, tensors):
    """The bound launcher of `launch` over `compiled` (what `kernel[grid]` returned), or None where this
    Triton's objects are not what this module was written against."""
    kernel = launch.kernel
    try:
        if getattr(kernel, "pre_run_hooks", None) or not _hooks_quiet():
            return None
        names = list(kernel.arg_names)
        signature = compiled.src.signature
        if list(signature) != names or len(launch.args) > len(names):
            return None
        if any(not str(signature[names[slot]]).startswith("*") for slot in launch.slots):
            return None  # a slot must be a pointer: it is passed as an address
        device = tensors[0].get_device() if tensors else _current_device()
        if device != _current_device() or any(t.data_ptr() & 15 for t in tensors):
            return None  # compiled for the current device, with every slot's pointer 16-byte aligned
        full = list(launch.args)
        for param in kernel.params[len(full) :]:
            if param.name in launch.meta:
                full.append(launch.meta[param.name])
            elif param.has_default:
                full.append(param.default)
            else:
                return None
        full = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in full]
        runner = compiled.run  # loads the module on the first use
        function, packed = compiled.function, compiled.packed_metadata
    except Exception:  # another Triton's objects: plain launches it is
        return None
    g0, g1, g2 = (*launch.grid, 1, 1)[:3]
    slots = launch.slots
    prefix = slots == tuple(range(len(slots)))
    tail = tuple(full[len(slots) :])
    direct = (
        type(runner).__name__ == "CudaLauncher"
        and getattr(runner, "global_scratch_size", 1) == 0
        and getattr(runner, "profile_scratch_size", 1) == 0
        and hasattr(runner, "launch")
    )
    stream_of = _raw_stream
    if direct:
        # CudaLauncher.__call__ without its Python frame: it only adds scratch buffers, none here.
        raw, coop, pdl = runner.launch, runner.launch_cooperative_grid, runner.launch_pdl
        head = (function, coop, pdl, None, None, packed, None, None, None)

        def call(stream, args):
            raw(g0, g1, g2, stream, *head, *args)

        if prefix:

            def go(ptrs):
                raw(g0, g1, g2, stream_of(device), *head, *ptrs, *tail)

            return go
    else:

        def call(stream, args):
            runner(g0, g1, g2, stream, function, packed, None, None, None, *args)

    if prefix:

        def go(ptrs):
            call(stream_of(device), (*ptrs, *tail))
    else:

        def go(ptrs):
            args = list(full)
            for slot, ptr in zip(slots, ptrs):
                args[slot] = ptr
            call(stream_of(device), args)

    return go


def remember(plans: dict, key, fresh):
    """The plan kept for `key` (`fresh` the first time). With VERIFY, a kept plan must equal `fresh`."""
    kept = plans.get(key)
    if kept is None:
        plans[key] = fresh
        return fresh
    if kept.describe() != fresh.describe():
        raise AssertionError(
            f"two calls with the key {key!r} need different launches: the key misses something"
        )
    return kept
