"""The "Check yourself" tab's six questions on the chapter: each with its options, the right one, the
explanation, and where on this page the effect can be seen."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Question:
    qid: str
    prompt: str
    options: tuple[str, ...]
    answer: int  # index into options
    explanation: str
    where: str  # the part of the page that shows it

    def __post_init__(self) -> None:
        if len(self.options) < 2 or len(set(self.options)) != len(self.options):
            raise ValueError(f"options: question {self.qid} needs at least two distinct options")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer: question {self.qid} has no option {self.answer}")


QUESTIONS: tuple[Question, ...] = (
    Question(
        qid="q1",
        prompt="Capturing a CUDA graph writes down a decode step. What exactly does the recording hold, "
        "and what does that force on the code around it?",
        options=(
            "The Python forward pass, which replay re-traces for whatever shapes arrive.",
            "Each kernel with its launch arguments, device addresses included, so every replay must find "
            "its inputs in the very buffers used at capture.",
            "The input values at capture time, so replays reproduce the captured tokens.",
            "Only the kernel order; the driver looks the arguments up again at each replay.",
        ),
        answer=1,
        explanation="A graph node is a kernel plus its arguments, and those arguments are raw pointers. "
        "Replay reruns the same kernels on the same addresses, so the runner allocates its input "
        "ids, positions, block tables and slot mapping once and copies each step's values into "
        "them; a tensor allocated afresh inside the captured region would sit somewhere else "
        "next step and the graph would read stale memory.",
        where="Simulator tab → switch on CUDA graphs: the CPU lane shrinks to one cudaGraphLaunch bar that "
        "submits every kernel. Live GPU probe tab → a graph run's CPU lane shows the same on a real GPU.",
    ),
    Question(
        qid="q2",
        prompt="Engines capture decode steps as whole graphs, one per batch size, but not prefill. Why is "
        "prefill harder to capture, and what do engines do about it?",
        options=(
            "Prefill kernels allocate the KV cache, and allocation is not allowed in a graph.",
            "Graph replay is slower than eager launching once matmuls get large.",
            "A prompt can be almost any length, so there is no small set of shapes to capture whole; and "
            "prefill is compute-bound, so its launch cost mostly hides behind the arithmetic. Engines run "
            "it eagerly or capture pieces of it by token count.",
            "Prefill runs on the CPU while decode runs on the GPU.",
        ),
        answer=2,
        explanation="A graph is only valid for the shapes it was captured with. Decode has one new token per "
        "request, so a handful of batch sizes covers it; prefill's token count ranges over "
        "thousands of values. Little is lost by launching it eagerly: with hundreds of tokens per "
        "kernel the GPU work dwarfs the few microseconds each launch costs. Engines still claw "
        "some of it back: vLLM's V1 engine captures piecewise graphs (everything but attention) "
        "for a list of token counts, so a mixed prefill-and-decode step padded up to one of those "
        "counts replays graphs too, with attention run eagerly between the pieces.",
        where='Simulator tab → with both toggles off, drag Batch size up until "Bound by" reads GPU: '
        "more rows per kernel fill the GPU lane, just as a long prompt's tokens would.",
    ),
    Question(
        qid="q3",
        prompt="Continuous batching changes the batch size every step, yet a graph has fixed shapes. "
        "How do engines keep replaying graphs, and what do they pay for it?",
        options=(
            "They capture a fresh graph whenever the batch size changes; the price is one capture per step.",
            "They capture once at the largest batch and always run that; it is free because the GPU idles anyway.",
            "Graphs accept a dynamic batch dimension, so nothing is paid.",
            "They capture one graph per bucket (1, 2, 4, 8, 16, 24, 32, …) and pad each batch up to the "
            "next bucket: the padded rows are wasted work, and every bucket pins some graph memory.",
        ),
        answer=3,
        explanation="Bucketing trades a little compute for the launch saving: a batch of 33 runs in the "
        "48 bucket, so 15 rows compute garbage that is thrown away. Finer buckets waste less "
        "padding, but every captured graph pins memory of its own (its kernel nodes, and static "
        "buffers where an engine does not share them), so the layout is a trade between padding "
        "waste and pinned memory. The intermediates are not multiplied: graphs are captured "
        "largest first into one shared memory pool, and each smaller graph reuses it.",
        where="Bucketing tab → compare the layouts' padding waste against their graph memory. Simulator "
        "tab → Batch size 33 with CUDA graphs on: the note under the readouts names the bucket (48) "
        "and the 15 padded rows.",
    ),
    Question(
        qid="q4",
        prompt="The padding rows of a bucket run the same kernels as real requests, including the KV-cache "
        "write. Why must their block table point at a scratch block (or their slot be -1)?",
        options=(
            "Otherwise a dummy row writes its garbage keys and values into a real request's cache block; the "
            "output stays plausible and the damage appears only at some batch sizes.",
            "Otherwise the replay fails with an out-of-bounds error.",
            "It saves memory bandwidth; the results would be the same either way.",
            "It zeroes the dummy rows' logits so the sampler skips them.",
        ),
        answer=0,
        explanation="Nothing crashes: attention writes to whatever block the dummy row's table names, and if "
        "that is a live request's block its cache is silently overwritten. vLLM gives padded "
        "rows slot -1 (the write kernel skips them), SGLang points them at a reserved slot 0. "
        "The bug is intermittent, depends on the batch size and yields believable text, which is "
        "why it needs an explicit check (a canary over the real blocks).",
        where='Bucketing tab → Padding-corruption demo: pad into "a real block (the bug)" and the canary '
        'fires and real rows\' logits move; pad into "the scratch block (safe)" and they stay put.',
    ),
    Question(
        qid="q5",
        prompt="When does launch overhead stop mattering, even with neither fusion nor graphs?",
        options=(
            "Never: it is a fixed share of every step.",
            "When the kernels of a step take longer than the CPU needs to submit them, as at large "
            "batch sizes: the launches then hide behind the GPU work.",
            "As soon as the model has more than 32 layers.",
            "Only when the GPU is replaced by a faster one.",
        ),
        answer=1,
        explanation="Launch cost is a fixed amount of CPU time per kernel, while kernel time grows with the "
        "batch. At batch 1 the kernels finish before the next launch arrives; at a large batch "
        "each kernel runs long enough to cover the next launch, the bubbles close and the step "
        "is GPU-bound. That is why graphs pay most in low-latency, low-concurrency serving. "
        "(A faster GPU makes it worse: the kernels shrink and the launches do not.)",
        where="Simulator tab → drag Batch size to 128 with both toggles off: the gaps in the GPU lane close "
        "on their own and GPU utilisation climbs.",
    ),
    Question(
        qid="q6",
        prompt="A step spends 2.1 ms of CPU time on launches and 0.9 ms of GPU time on kernels. "
        "Why does it take about 2.1 ms rather than 3.0 ms?",
        options=(
            "The CPU waits for each kernel to finish, so the GPU time is already inside the 2.1 ms.",
            "Only the first launches are drawn, so the rest of the time is missing.",
            "The 0.9 ms of kernels is counted in the launch cost.",
            "The lanes overlap: the GPU runs one kernel while the CPU builds the next launch, so the step "
            "lasts as long as the slower lane.",
        ),
        answer=3,
        explanation="Launches are asynchronous: the host queues work and moves on. The step is the larger "
        "of the two lanes plus a little start-up, never their sum, so shrinking the smaller one "
        "changes nothing. Here the GPU is idle more than half the time, waiting for the CPU.",
        where='Simulator tab → at batch 1, hold "Where the time goes" (CPU launch cost, GPU execution) '
        "against the Step time readout, then turn on Kernel fusion and CUDA graphs: Step time follows "
        'whichever bar is longer, and "Bound by" flips from CPU launch to GPU.',
    ),
)
