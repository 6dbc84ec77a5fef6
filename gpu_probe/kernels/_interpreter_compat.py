"""Make Triton 3.6's CPU interpreter work with NumPy >= 2.4 (only when TRITON_INTERPRET=1).

The interpreter holds every scalar as a 1-element array and converts it with int(array),
which NumPy 2.4 refuses for arrays of ndim > 0; so `range(0, K, BLOCK)` over a scalar kernel
argument fails. We re-patch `tensor.__index__` to read the single element. No-op on GPU.
"""

from __future__ import annotations

import os


def install() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_probe_compat", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        # Registered through the scope, so the interpreter restores it like its own patches.
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patch_lang_tensor._probe_compat = True
    interpreter._patch_lang_tensor = patch_lang_tensor
