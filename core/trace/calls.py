"""Which of a trace's calls are launches, and which launch submitted each GPU event.

A GPU event carries the correlation id of the API call that submitted it (one graph launch correlates with every
kernel it replays). A runtime call can show the driver call it makes as a second event inside it: the outermost
call on its thread is the launch. Built once per trace and cached on it: the step finder and the lanes both look
launches up here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from core.trace.read import Trace

_LAUNCH_PREFIXES = (
    "cudaLaunch",  # cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel(Multidevice)
    "cuLaunch",  # cuLaunchKernel(Ex), cuLaunchCooperativeKernel: Triton and other driver-API launchers
    "cudaGraphLaunch",
    "cuGraphLaunch",
    "cudaMemcpy",
    "cuMemcpy",
    "cudaMemset",
    "cuMemset",
)
_GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
_SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
    }
)

# A kernel that only copies: the input copies a graph runner issues before its replay
# (torch._foreach_copy_, `copy_`, dtype casts) look like this.
_COPY_KERNEL = re.compile(r"copy", re.IGNORECASE)

# The calls whose traced duration tells the host's speed (HostRecord.launch_call_us): kernel launches.
_KERNEL_LAUNCHES = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel",
)


@dataclass(frozen=True, eq=False)
class LaunchIndex:
    """What the step finder and the lanes need to look up fast, built once per trace."""

    launch: np.ndarray  # call indices of the launch calls (outermost per thread), sorted by start
    position: np.ndarray  # per call: its position in `launch` (-1: not a launch)
    is_graph: np.ndarray  # per launch: a graph launch?
    is_copy: np.ndarray  # per launch: does it only copy inputs in (no copy to the host)?
    is_kernel_launch: np.ndarray  # per launch: a kernel launch call (not a graph launch, copy or memset)?
    sync: np.ndarray  # call indices of host synchronisation calls, sorted by start
    gpu_by_owner: np.ndarray  # GPU event rows ordered by the position of the launch that owns them
    owner_sorted: np.ndarray  # that position, for each row of gpu_by_owner (-1: no launch owns it)
    # GPU event rows no launch call owns (its record dropped, or before the profile), by start
    orphans: np.ndarray


def launch_index(trace: Trace) -> LaunchIndex:
    """The trace's launches and who owns each GPU event (cached on the trace)."""
    cached = trace.__dict__.get("_launch_index")
    if cached is not None:
        return cached
    names = trace.names
    is_launch = np.array([n.startswith(_LAUNCH_PREFIXES) for n in names], bool)
    is_sync = np.array([n in _SYNC_CALLS for n in names], bool)
    name = trace.call_name
    # Which calls a GPU event's correlation id names.
    known = np.unique(trace.gpu_corr[trace.gpu_corr >= 0])
    correlated = np.isin(trace.call_corr, known) & (trace.call_corr >= 0)
    candidate = (is_launch[name] | correlated) & ~is_sync[name]
    keep, outermost = _outermost(trace, candidate)
    launch = np.flatnonzero(keep)
    position = np.full(len(name), -1, np.int64)
    position[launch] = np.arange(len(launch))
    owner = _owners(trace, np.flatnonzero(candidate & correlated), position[outermost])
    gpu_by_owner = np.argsort(owner, kind="stable")
    owner_sorted = owner[gpu_by_owner]
    out = LaunchIndex(
        launch=launch,
        position=position,
        is_graph=np.array([n.startswith(_GRAPH_LAUNCHES) for n in names], bool)[name[launch]],
        is_copy=_copies_in(trace, launch, owner),
        is_kernel_launch=np.array([n.startswith(_KERNEL_LAUNCHES) for n in names], bool)[name[launch]],
        sync=np.flatnonzero(is_sync[name]),
        gpu_by_owner=gpu_by_owner,
        owner_sorted=owner_sorted,
        orphans=gpu_by_owner[owner_sorted < 0],
    )
    object.__setattr__(trace, "_launch_index", out)
    return out


def _outermost(trace: Trace, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the candidate calls that are launches, per call the outermost call around it).

    A runtime call can show the driver call it makes as a second event inside it: keep the outermost one, per
    host thread (launches on two threads overlap in time legitimately). Intervals on one thread either nest or
    are disjoint, so "starts before an earlier call has ended" means nested; a nested call's GPU work belongs to
    the call around it."""
    outermost = np.arange(len(trace.call_name))
    keep = candidate.copy()
    for thread in np.unique(trace.call_thread[candidate]):
        rows = np.flatnonzero(candidate & (trace.call_thread == thread))
        running = np.maximum.accumulate(trace.call_ts[rows] + trace.call_dur[rows])
        nested = np.zeros(len(rows), bool)
        nested[1:] = trace.call_ts[rows[1:]] < running[:-1]
        keep[rows[nested]] = False
        last_outer = np.maximum.accumulate(np.where(nested, 0, np.arange(len(rows))))
        outermost[rows] = rows[last_outer]
    return keep, outermost


def _owners(trace: Trace, calls_with_corr: np.ndarray, launch_of_call: np.ndarray) -> np.ndarray:
    """Per GPU event: the position of the launch that owns it (-1: none), by correlation id."""
    gpu_corr = trace.gpu_corr
    owner = np.full(len(gpu_corr), -1, np.int64)
    if len(calls_with_corr):
        order = np.argsort(trace.call_corr[calls_with_corr], kind="stable")
        corr_sorted = trace.call_corr[calls_with_corr][order]
        at = np.minimum(np.searchsorted(corr_sorted, gpu_corr), len(corr_sorted) - 1)
        hit = (corr_sorted[at] == gpu_corr) & (gpu_corr >= 0)
        owner[hit] = launch_of_call[calls_with_corr[order][at[hit]]]
    return owner


def _copies_in(trace: Trace, launch: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Per launch: does it only copy inputs in? Where it has GPU work, all of it copies (a copy back to the
    host, the sampled token, is a step's output, never a graph's input); without GPU work its name decides."""
    names = trace.names
    is_copy_call = np.array(
        [n.startswith(("cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset")) for n in names]
    )
    is_copy_kernel = np.array(
        [
            (bool(_COPY_KERNEL.search(n)) or n.startswith(("Memcpy", "Memset"))) and "DtoH" not in n
            for n in names
        ]
    )
    mine = owner >= 0
    work = np.bincount(owner[mine], minlength=len(launch))
    copies = np.bincount(owner[mine], weights=is_copy_kernel[trace.gpu_name[mine]], minlength=len(launch))
    return np.where(work > 0, copies == work, is_copy_call[trace.call_name[launch]]).astype(bool)
