"""A benchmark client's command line, read as the client reads it, into the load it sends: how many requests, their
prompt and output lengths drawn as the client draws them, all at once or at a rate, and at most how many in flight.

Clients (each read from its own source, the release named in ``CLIENTS``):

- ``vllm bench serve`` (and ``benchmarks/benchmark_serving.py``), vLLM 0.24.0, random dataset: lengths uniform over
  whole numbers in [floor((L - s)(1 - r)), ceil((L - s)(1 + r))] for the prompt (s: the tokenizer's special tokens,
  added back by the server's tokenizer) and [max(floor(L(1 - r)), 1), ceil(L(1 + r))] for the output, both from
  ``numpy.random.default_rng(seed)`` (vllm/benchmarks/datasets/utils.py get_sampling_params); ``--random-range-ratio``
  may be a number or {"input": a, "output": b}; outputs run to their length only with ``--ignore-eos``.
  Defaults: 1,000 prompts, 1,024 and 128 tokens, ratio 0, seed 0, rate inf, no concurrency cap, 0 warm-ups.
- ``python -m sglang.bench_serving``, SGLang 0.5.14, random dataset: lengths from ``numpy.random.randint(max(int(L r),
  1), L + 1)`` after ``numpy.random.seed(seed)``, prompts first (sglang/benchmark/datasets/common.py
  compute_random_lens); outputs run to their length (``ignore_eos`` unless ``--disable-ignore-eos``). Defaults:
  1,000 prompts, 1,024 and 1,024 tokens, ratio 0, seed 42, rate inf, no cap, 1 warm-up.

Both clients send their warm-up requests and wait for them to finish before the timed run starts, so the server is
idle in between and nothing the simulator models carries over (random prompts share no prefix): they are counted,
not replayed. A rate below infinity is replayed with the simulator's own seeded draws, not the client's.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

import numpy as np

from ..scenario.caps import DEFAULT_CAPS
from ..scenario.errors import ScenarioError, excerpt
from .bench_results import BenchResult


@dataclass(frozen=True)
class Client:
    """One benchmark client as the replay reads it."""

    name: str               # as its users call it
    release: str            # the release its defaults and draws were read from
    engine: str             # the engine its project serves with (the replay's default server engine)
    seed: int               # its --seed default
    output_tokens: int      # its --random-output-len default
    warmups: int            # its warm-up default
    warmup_flag: str


VLLM = Client("vllm bench serve", "vLLM 0.24.0", "vllm", 0, 128, 0, "--num-warmups")
SGLANG = Client("python -m sglang.bench_serving", "SGLang 0.5.14", "sglang", 42, 1024, 1, "--warmup-requests")
RANDOM_DATASETS = ("random",)


@dataclass(frozen=True)
class BenchCommand:
    """A client's command, read: the load it sends (``BenchResult`` with no measured figures) and what else it
    said that the replay must tell the reader."""

    client: Client
    load: BenchResult
    warmups: int
    ignore_eos: bool


def _client(words: list[str]) -> tuple[Client, list[str]]:
    """The client a command runs and the words after its program."""
    for i, word in enumerate(words):
        if word == "vllm" and words[i + 1:i + 3] == ["bench", "serve"]:
            return VLLM, words[i + 3:]
        if word.endswith("benchmark_serving.py"):
            return VLLM, words[i + 1:]
        if word == "sglang.bench_serving" or word.endswith("sglang/bench_serving.py"):
            return SGLANG, words[i + 1:]
    raise ScenarioError(f"the command {excerpt(' '.join(words))} runs no client the replay reads; give a "
                        f"'vllm bench serve ...' or 'python -m sglang.bench_serving ...' command")


def _parser(client: Client) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=client.name, add_help=False, allow_abbrev=False)
    parser.add_argument("--dataset-name", default="random" if client is VLLM else "sharegpt")
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--random-input-len", type=int, default=1024)
    parser.add_argument("--random-output-len", type=int, default=client.output_tokens)
    parser.add_argument("--random-range-ratio", default="0.0")
    parser.add_argument("--seed", type=int, default=client.seed)
    parser.add_argument("--request-rate", type=float, default=math.inf)
    parser.add_argument("--max-concurrency", type=int, default=None)
    parser.add_argument("--model", default="")
    parser.add_argument(client.warmup_flag, dest="warmups", type=int, default=client.warmups)
    if client is VLLM:
        parser.add_argument("--ignore-eos", action="store_true")
        parser.add_argument("--random-prefix-len", type=int, default=0)
    else:
        parser.add_argument("--disable-ignore-eos", action="store_true")
    return parser


class _Refused(Exception):
    pass


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line for the caller, never argparse's exit
        raise _Refused(message)


def _ratios(text: str) -> tuple[float, float]:
    """vLLM's --random-range-ratio: one number for both, or {"input": a, "output": b}."""
    try:
        value = json.loads(text)
        if isinstance(value, dict):
            pair = (float(value["input"]), float(value["output"]))
        else:
            pair = (float(value), float(value))
    except (ValueError, KeyError, TypeError):
        raise ScenarioError(f"--random-range-ratio = {excerpt(text)} is not a number or "
                            f'{{"input": a, "output": b}}') from None
    if not all(0.0 <= r < 1.0 for r in pair):
        raise ScenarioError(f"--random-range-ratio = {excerpt(text)}: each ratio must be at least 0 and below 1")
    return pair


def vllm_lengths(n: int, input_len: int, output_len: int, ratios: tuple[float, float], seed: int,
                 special_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths as vLLM 0.24.0's random dataset draws them, prompts as the server counts them."""
    r_in, r_out = ratios
    real = max(0, input_len - special_tokens)
    rng = np.random.default_rng(seed)
    inputs = rng.integers(math.floor(real * (1 - r_in)), math.ceil(real * (1 + r_in)) + 1, size=n)
    out_low = max(math.floor(output_len * (1 - r_out)), 1)
    outputs = rng.integers(out_low, max(math.ceil(output_len * (1 + r_out)), 1) + 1, size=n)
    return inputs.astype(np.int64) + special_tokens, outputs.astype(np.int64)


def sglang_lengths(n: int, input_len: int, output_len: int, ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths as SGLang 0.5.14's random dataset draws them (prompts as the server counts them:
    the client removes the special tokens the server's tokenizer adds back)."""
    state = np.random.RandomState(seed)  # numpy.random.seed(seed), then the module's draws, as the client's
    inputs = state.randint(max(int(input_len * ratio), 1), input_len + 1, size=n)
    outputs = state.randint(max(int(output_len * ratio), 1), output_len + 1, size=n)
    return inputs.astype(np.int64), outputs.astype(np.int64)


def read_command(words: list[str], special_tokens: int = 0) -> BenchCommand:
    """The load ``words`` (a client's command line, split as a shell splits it) sends; one ``ScenarioError`` line
    for a command the replay cannot read (another client, another dataset, a value out of range)."""
    client, rest = _client(words)
    parser = _parser(client)
    quiet = _QuietParser(prog=client.name, add_help=False, allow_abbrev=False, parents=[parser])
    try:
        args, _ = quiet.parse_known_args(rest)
    except _Refused as exc:
        raise ScenarioError(f"{client.name}: {exc}") from None
    if args.dataset_name not in RANDOM_DATASETS:
        raise ScenarioError(f"{client.name} --dataset-name {excerpt(args.dataset_name)}: the replay draws the random "
                            f"dataset's lengths; for another dataset save the run's result with its per-request "
                            f"lengths (vllm: --save-result --save-detailed) and give it to python -m engine calibrate")
    caps = DEFAULT_CAPS
    n = args.num_prompts
    if not 1 <= n <= caps.requests_per_run:
        raise ScenarioError(f"{client.name} --num-prompts = {n}: replay 1 to {caps.requests_per_run:,}")
    for flag, value in (("--random-input-len", args.random_input_len), ("--random-output-len",
                                                                        args.random_output_len)):
        if not 1 <= value <= caps.tokens_per_request:
            raise ScenarioError(f"{client.name} {flag} = {value}: give 1 to {caps.tokens_per_request:,} tokens")
    if not (args.request_rate > 0 and not math.isnan(args.request_rate)):
        raise ScenarioError(f"{client.name} --request-rate = {args.request_rate:g}: give a rate above 0, or inf")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ScenarioError(f"{client.name} --max-concurrency = {args.max_concurrency}: give 1 or more")
    if client is VLLM:
        if args.random_prefix_len:
            raise ScenarioError(f"{client.name} --random-prefix-len: a shared prefix is not replayed; leave it at 0")
        inputs, outputs = vllm_lengths(n, args.random_input_len, args.random_output_len,
                                       _ratios(args.random_range_ratio), args.seed, special_tokens)
        ignore_eos = args.ignore_eos
    else:
        ratio = _ratios(args.random_range_ratio)[0]
        inputs, outputs = sglang_lengths(n, args.random_input_len, args.random_output_len, ratio, args.seed)
        ignore_eos = not args.disable_ignore_eos
    load = BenchResult(name=f"{client.name} command", tool=client.name, model_id=args.model, input_tokens=inputs,
                       output_tokens=outputs, rate_per_s=args.request_rate, concurrency=args.max_concurrency)
    return BenchCommand(client, load, args.warmups, ignore_eos)
