"""Kernels by name: a kernel's short name for the lanes and tables, and how many kernels a decoder layer runs,
read off a step's kernel sequence."""

_ANONYMOUS = "(anonymous namespace)"


def short_kernel_name(name: str, limit: int | None = 60, namespaces: bool = True) -> str:
    """A kernel's name without return type, template arguments and parameter list; a namespace part of the name
    ('at::native::(anonymous namespace)::CatArrayBatchedCopy') is kept whole, unless `namespaces` is False (the
    lanes' launch labels, as the recorded runs wrote them: 'at::native::::CatArrayBatchedCopy'). `limit`: at most
    this many characters (cut with '…'); None: never cut."""
    if name.startswith("void "):
        name = name[5:]
    depth, out = 0, []
    for ch in name.replace(_ANONYMOUS, "\0") if namespaces else name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    short = "".join(out).strip().replace("\0", _ANONYMOUS) or name
    return short if limit is None or len(short) <= limit else short[: limit - 1] + "…"


def kernels_per_layer(names, n_layers: int) -> tuple[int, bool]:
    """Kernels per decoder layer, read off the step's kernel sequence.

    Finds the longest block of kernel names that repeats `n_layers` times in a row (the layers
    run identical kernels), so everything before and after -- embedding, input copies, final
    norm, LM head -- is left out without knowing which kernel is which. Longest, not shortest:
    two equal neighbours inside a layer must not pass for a period of 1. Longer false periods
    cannot occur: n_layers repeats of a longer block would not fit in the step. Where the
    first or last layer differs (a compiler fusing across the boundary), n_layers - 1 or - 2
    repeats are accepted with exact=False; the repeats must cover at least half the step.
    With no such repeat the answer is len(names) // n_layers, exact=False.
    """
    names = list(names)
    total = len(names)
    for repeats in (n_layers, n_layers - 1, n_layers - 2):
        if repeats < 2:
            break
        # The layers are most of a step: a repeat covering less than half of it is a coincidence.
        for period in range(total // repeats, -(-total // (2 * repeats)) - 1, -1):
            if period and _repeats_somewhere(names, period, repeats):
                return period, repeats == n_layers
    return total // max(n_layers, 1), False


def _repeats_somewhere(names: list, period: int, repeats: int) -> bool:
    span = period * repeats
    for offset in range(0, len(names) - span + 1):
        if names[offset : offset + span - period] == names[offset + period : offset + span]:
            return True
    return False
