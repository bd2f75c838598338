"""A plan as something to deploy: the launch command of each serving engine, at a named version, and a Kubernetes
manifest for the fleet.

For a priced plan (``planner.plan_entry``) on its scenario: the command that starts one server of the plan's shape
under vLLM, SGLang and TensorRT-LLM, reading the weights from ``$MODEL`` (by default a published checkpoint of the
plan's own weight format, ``data/hardware/checkpoints.csv``, else the base model with what to do said beside it):
tensor, expert and attention data-parallel sizes, most sequences, token budget per iteration, KV-cache format, prefix
caching, speculative decoding, the share of GPU memory, each flag as the engine's command line documents it at
``ENGINE_VERSIONS`` (the releases whose kernels price the plan's step times, where their flags could be read; the test
suite checks every flag against the engine's own parser at that release); and a Deployment and Service with the
plan's replicas and GPU requests, the GPU's node label where it is known (``data/hardware/node_labels.csv``), a model
cache volume and a readiness probe, on the scenario's engine (for a disaggregated plan a prefill and a decode
Deployment, on SGLang, whose command line documents the split). What the engines cannot take as a flag is said
beside the command: the plan's scheduling policy and router are the simulator's; the engines order requests first
come, first served (vLLM also by a priority the client sends), and a Kubernetes Service spreads connections, not
requests.

A name a shared link sets (an own model's) is data in every file: an own model's folder is a slug of safe characters
(``model_slug``), the scripts take MODEL's default in single quotes and every other word through ``shlex.quote``, the
manifest's values are JSON strings and its names DNS-1123 labels, and a name in a comment or text line is one line
(``one_line``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import unicodedata
from dataclasses import dataclass

from ..hardware.roofline import GIB, peak_profile
from ..hardware.tables import gpu_row, is_slice, load_table, released_formats
from ..scenario import schedulers
from ..scenario.config import Scenario
from ..scenario.labels import counted, format_label, parallel_label, words
from ..sim.policies import POLICY_LABELS

# The documented CLIs emitted: vLLM and SGLang at the releases whose kernels price the plans (the operator tables'
# newest collections); TensorRT-LLM at the release its flags could be read near (its tables are 1.3.0rc20's).
ENGINE_VERSIONS = {"vllm": "v0.24.0", "sglang": "v0.5.14", "tensorrt-llm": "1.0.0"}
IMAGES = {"vllm": "vllm/vllm-openai:v0.24.0", "sglang": "lmsysorg/sglang:v0.5.14",
          "tensorrt-llm": "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"}  # the engines' published images of them
ROCM_VLLM_VERSION = "v0.11.2"  # AMD's ROCm build of vLLM, what an AMD plan's vLLM runs: every flag emitted exists
# there too (the v0.11.0 parser had them all)
ROCM_IMAGE = f"rocm/vllm:rocm7.0.0_vllm_{ROCM_VLLM_VERSION[1:]}_20251210"
MODEL_WORD = "$MODEL"  # where a command reads the weights: the launch scripts' MODEL variable
CACHE_PATH = "/root/.cache/huggingface"  # where the engines keep downloaded weights (HF_HOME), on the cache volume
MODELS_PATH = "/models"  # where a model of the user's own is read from: the cache volume's folder "models"
CACHE_HEADROOM = 1.25  # the cache volume: the checkpoint's weights and this much more (tokenizer, a second copy while
# a download is replaced)
PORT = 8000
RECIPE_ENGINES = ("vllm", "sglang", "tensorrt-llm")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}
TOKEN_SECRET = "hf-token"  # the Kubernetes secret holding a Hugging Face token (key "token"), for gated models
AMD_VENDOR = "amd"
KV_DTYPES = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8_e4m3"}, "tensorrt-llm": {"fp8": "fp8"}}  # else auto
TRT_CAVEAT = ("TensorRT-LLM: its flags were checked against its command line of August 2025, just before release "
              "1.0.0, and the options file's keys against its documentation's examples; the plan's step times use "
              "the kernels of 1.3.0rc20 (a later release may be faster than 1.0.0): check the flags with "
              "`trtllm-serve --help` of the release you run.")
FP8_WEIGHTS = ("fp8",)  # weight formats an engine quantizes a 16-bit checkpoint to at load time
SIXTEEN_BIT = ("fp16", "bf16")
FIRST_COME_POLICIES = ("fifo", "vllm-fcfs")  # the engines' own order: nothing to put in front of them
# Names a shared link can set (an own model's, above all) reach scripts, a manifest and text files: a folder slug is
# made only of SLUG_CHARS, at most SLUG_MAX_CHARS of them; a name in a comment or text line is one line.
SLUG_CHARS = re.compile(r"[^A-Za-z0-9._-]+")  # a run of anything else becomes one "-"
SLUG_MAX_CHARS = 60
LINE_BREAKING = ("Cc", "Cf", "Cs", "Zl", "Zp")  # Unicode categories replaced in a line: controls (\n, \r, U+0085),
# format characters (bidirectional overrides), lone surrogates, the line and paragraph separators U+2028/U+2029
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a Kubernetes name and label value (RFC 1123)


def one_line(name: object) -> str:
    """``name`` as one safe line of text: each control, format or line-separating character becomes a space, so a
    name can neither end a comment (shell, YAML) nor start a new line or key."""
    return "".join(" " if unicodedata.category(c) in LINE_BREAKING else c for c in str(name))


def model_slug(name: str) -> str:
    """A folder name for an own model: ``name`` without " (your config)", each run of characters other than
    letters, digits, ".", "_", "-" one "-", at most ``SLUG_MAX_CHARS``; "model" where nothing (or only dots) is
    left."""
    slug = SLUG_CHARS.sub("-", name.replace("(your config)", "")).strip("-")[:SLUG_MAX_CHARS].strip("-")
    return slug if slug.strip(".") else "model"


@dataclass(frozen=True)
class Command:
    """One engine's launch command: the program, its (flag, value) pairs in order (value None: a switch), where the
    weights come from (``model``, written ``MODEL_WORD`` in the program and flags), the extra YAML file it reads
    (TensorRT-LLM), and what the reader must know."""

    engine: str
    program: tuple[str, ...]
    flags: tuple[tuple[str, str | None], ...]
    model: str = ""
    extra_yaml: str = ""
    notes: tuple[str, ...] = ()

    def argv(self, model: str | None = None) -> list[str]:
        """The command as argument words, the weights read from ``model`` (default: the checkpoint named)."""
        words = list(self.program)
        for flag, value in self.flags:
            words += [flag] if value is None else [flag, value]
        weights = self.model if model is None else model
        return [weights if w == MODEL_WORD else w for w in words]

    def shell(self) -> str:
        """The command as one shell line, each flag on its own continued line, the weights from ``$MODEL``."""
        def quoted(word: str) -> str:
            return f'"{MODEL_WORD}"' if word == MODEL_WORD else shlex.quote(word)
        lines = [" ".join(quoted(w) for w in self.program)]
        lines += [f"  {flag}" if value is None else f"  {flag} {quoted(value)}" for flag, value in self.flags]
        return " \\\n".join(lines)


@dataclass(frozen=True)
class Checkpoint:
    """Where a plan's weights come from: ``repo`` (a Hugging Face repository, or a path for the user's own model),
    whether the engines must quantize it to FP8 as they load it, and what the reader must do ("" when nothing)."""

    repo: str
    quantize_fp8: bool = False
    note: str = ""


def checkpoint(plan: dict, scenario: Scenario) -> Checkpoint:
    """The checkpoint a plan's servers load: a published one of the plan's weight format (checkpoints.csv), else the
    base model (16-bit; FP8 quantized at load time by vLLM and SGLang), saying what to set MODEL to where neither
    holds the plan's format."""
    server, quant = scenario.server, plan["quant"]
    named = format_label(quant)
    if server.own_model is not None or server.model not in load_table("models").index:
        folder = model_slug(server.model)
        return Checkpoint(f"{MODELS_PATH}/{folder}", False,
                          f"MODEL: the folder (or Hugging Face repository) of your model {one_line(server.model)} "
                          f"with {named} weights. On Kubernetes, copy the folder into the model cache volume as "
                          f"models/{folder}: every server pod mounts that volume's models folder at {MODELS_PATH}.")
    table = load_table("checkpoints")
    rows = table[table.index == server.model]
    exact = rows[rows["quant"] == quant]
    if len(exact):
        return Checkpoint(str(exact["hf_repo"].iloc[0]))
    base = str(load_table("models").loc[server.model, "hf_repo"])
    if quant in SIXTEEN_BIT:
        native = released_formats(server.model)
        if native:
            return Checkpoint(base, False, f"{server.model} is published with {format_label(native[0])} "
                                           f"weights; this plan is sized for 16-bit ones: set MODEL to a BF16 copy.")
        return Checkpoint(base)
    if quant in FP8_WEIGHTS:
        return Checkpoint(base, True)
    return Checkpoint(base, False, f"No published {named} checkpoint of {server.model} is listed "
                                   f"(data/hardware/checkpoints.csv): set MODEL to one; the engines read its format "
                                   f"from the checkpoint.")


def vendor(gpu: str) -> str:
    """"amd" for an Instinct card, else "nvidia" (the Kubernetes resource and images differ)."""
    return AMD_VENDOR if str(gpu_row(gpu)["family"]).startswith("cdna") else "nvidia"


def version_text(engine: str, gpu: str) -> str:
    """The release a recipe's ``engine`` runs on ``gpu``: AMD's ROCm build of vLLM on an Instinct card (its image is
    the manifest's), else ``ENGINE_VERSIONS``'."""
    if engine == "vllm" and vendor(gpu) == AMD_VENDOR:
        return f"{ROCM_VLLM_VERSION} (AMD's ROCm build)"
    return ENGINE_VERSIONS[engine]


def _policy_note(plan: dict) -> str:
    """What the engines cannot take as a flag: the plan's policy (unless it is first come, first served, as theirs)
    and its router."""
    name, router = plan["policy"]["name"], words("router", plan["router"])
    if name in FIRST_COME_POLICIES:
        return (f"The router ({router}) is the simulator's; a Kubernetes Service spreads connections, not requests: "
                "put a request-level router in front for the plan's figures.")
    return (f"The plan's scheduling policy ({POLICY_LABELS.get(name, name)}) and router ({router}) are the "
            "simulator's: the engines order requests first come, first served (vLLM also by a priority each request "
            "carries, with --scheduling-policy priority); put the policy in a gateway in front of them, or expect "
            "the figures of a first-come-first-served plan.")


def commands(plan: dict, scenario: Scenario) -> list[Command]:
    """The launch command of one server of ``plan`` under each engine of ``RECIPE_ENGINES`` (TensorRT-LLM only on
    NVIDIA cards)."""
    server = scenario.server
    cards = plan["tensor_parallel"]
    split = bool(plan.get("expert_parallel"))
    weights = checkpoint(plan, scenario)
    repo = MODEL_WORD
    kv = server.kv_quant
    fp8_weights = weights.quantize_fp8
    speculative = plan["decoding"] == "speculative" and server.speculative is not None
    draft = None
    if speculative and server.speculative.draft_model:
        draft = str(load_table("models").loc[server.speculative.draft_model, "hf_repo"])
    k = server.speculative.draft_tokens if speculative else 0
    notes = [_policy_note(plan)] + ([weights.note] if weights.note else [])
    out = []

    vllm = [("--host", "0.0.0.0"), ("--port", str(PORT))]
    vllm += ([("--tensor-parallel-size", "1"), ("--data-parallel-size", str(cards)), ("--enable-expert-parallel", None)]
             if split else [("--tensor-parallel-size", str(cards))])
    vllm += [("--max-num-seqs", str(server.max_batch_size)),
             ("--max-num-batched-tokens", str(server.max_batched_tokens)),
             ("--gpu-memory-utilization", f"{server.gpu_memory_utilization:g}"),
             ("--kv-cache-dtype", KV_DTYPES["vllm"].get(kv, "auto")),
             ("--enable-prefix-caching" if server.prefix_caching else "--no-enable-prefix-caching", None)]
    vllm += [("--quantization", "fp8")] if fp8_weights else []
    if speculative:
        spec = {"num_speculative_tokens": k, **({"model": draft} if draft else {})}
        vllm.append(("--speculative-config", json.dumps(spec, separators=(",", ":"))))
    out.append(Command("vllm", ("vllm", "serve", repo), tuple(vllm), weights.repo, notes=tuple(notes)))

    sglang = [("--model-path", repo), ("--host", "0.0.0.0"), ("--port", str(PORT)), ("--tp-size", str(cards))]
    sglang += ([("--dp-size", str(cards)), ("--enable-dp-attention", None), ("--ep-size", str(cards))]
               if split else [])
    sglang += [("--max-running-requests", str(server.max_batch_size)),
               ("--chunked-prefill-size", str(server.max_batched_tokens)),
               ("--mem-fraction-static", f"{server.gpu_memory_utilization:g}"),
               ("--kv-cache-dtype", KV_DTYPES["sglang"].get(kv, "auto"))]
    sglang += schedulers.sglang.flags(server)
    sglang += [] if server.prefix_caching else [("--disable-radix-cache", None)]
    sglang += [("--quantization", "fp8")] if fp8_weights else []
    if speculative and draft:
        sglang += [("--speculative-algorithm", "STANDALONE"), ("--speculative-draft-model-path", draft),
                   ("--speculative-num-steps", str(k)), ("--speculative-eagle-topk", "1"),
                   ("--speculative-num-draft-tokens", str(k + 1))]
    out.append(Command("sglang", ("python3", "-m", "sglang.launch_server"), tuple(sglang), weights.repo,
                       notes=tuple(notes)))

    if vendor(plan["gpu"]) != AMD_VENDOR:
        options = {"kv_cache_config": {"dtype": KV_DTYPES["tensorrt-llm"].get(kv, "auto"),
                                       "enable_block_reuse": bool(server.prefix_caching),
                                       "free_gpu_memory_fraction": round(server.gpu_memory_utilization, 3)},
                   "enable_attention_dp": split, **schedulers.tensorrt_llm.options(server, split)}
        if speculative and draft:
            options["speculative_config"] = {"decoding_type": "DraftTarget", "max_draft_len": k,
                                             "speculative_model": draft}
        trt = [("--backend", "pytorch"), ("--host", "0.0.0.0"), ("--port", str(PORT)), ("--tp_size", str(cards))]
        trt += [("--ep_size", str(cards))] if split else []
        trt += [("--max_batch_size", str(server.max_batch_size)), ("--max_num_tokens", str(server.max_batched_tokens)),
                ("--kv_cache_free_gpu_memory_fraction", f"{server.gpu_memory_utilization:g}"),
                ("--extra_llm_api_options", "extra-llm-api-options.yaml")]
        trt_notes = notes + [TRT_CAVEAT] + ([f"TensorRT-LLM does not quantize to FP8 at load time: point MODEL at an "
                                             f"FP8 checkpoint of {server.model}."] if fp8_weights else [])
        out.append(Command("tensorrt-llm", ("trtllm-serve", repo), tuple(trt), weights.repo,
                           extra_yaml=_yaml(options), notes=tuple(trt_notes)))
    return out


def _yaml(value, indent: int = 0) -> str:
    """A small mapping of scalars and mappings as YAML (JSON scalars are YAML scalars)."""
    lines = []
    for key, item in value.items():
        if isinstance(item, dict):
            lines.append(f"{' ' * indent}{key}:")
            lines.append(_yaml(item, indent + 2))
        else:
            lines.append(f"{' ' * indent}{key}: {json.dumps(item)}")
    return "\n".join(lines)


def manifest(plan: dict, scenario: Scenario, name: str = "llm") -> str:
    """A Kubernetes Deployment and Service of ``plan`` on the scenario's engine (vLLM for the engines of 2023-24
    and on AMD cards, in AMD's ROCm image; a disaggregated plan: a prefill and a decode Deployment on SGLang), each
    pod one server with its GPUs."""
    engine = scenario.server.engine if scenario.server.engine in RECIPE_ENGINES else "vllm"
    for made in (name, f"{name}-prefill-options"):  # the Service and the longest name made from it
        dns_label(made)
    pools = ([("prefill", plan["prefill_replicas"]), ("decode", plan["decode_replicas"])]
             if "prefill_replicas" in plan else [("", plan["replicas"])])
    amd = vendor(plan["gpu"]) == AMD_VENDOR
    if len(pools) == 2:
        engine = "sglang"
    elif amd:
        engine = "vllm"  # the ROCm image the recipe names
    command = next(c for c in commands(plan, scenario) if c.engine == engine)
    resource = f"{vendor(plan['gpu'])}.com/gpu"
    gpus = 1 if is_slice(plan["gpu"]) else plan["tensor_parallel"]
    cache = f"{name}-model-cache"
    pod = Pod(resource, gpus, command.model, node_selector(plan["gpu"]), cache, command.extra_yaml)
    docs = [_cache_claim(cache, cache_gib(plan, scenario))]
    for pool, replicas in pools:
        app = f"{name}-{pool}" if pool else name
        argv = command.argv("$(MODEL)") + (["--disaggregation-mode", pool] if pool else [])
        image = ROCM_IMAGE if amd and engine == "vllm" else IMAGES[engine]
        docs.append(_deployment(app, replicas, image, argv, pod))
    docs.append(_service(name, f"{name}-{pools[0][0]}" if pools[0][0] else name))
    label = ("" if pod.node_selector else
             f"# No node label is known for {one_line(plan['gpu'])}: add a nodeSelector on your cluster's GPU label "
             f"(kubectl get nodes --show-labels).\n")
    header = (f"# {counted(plan['replicas'], 'server')} of {shape_text(plan)} {one_line(plan['gpu'])} on "
              f"{ENGINE_NAMES[engine]} {version_text(engine, plan['gpu'])}, generated by Scheduler Lab. Gated models "
              f"(Llama) read a Hugging Face token from the secret {TOKEN_SECRET}:\n#   kubectl create secret generic "
              f"{TOKEN_SECRET} --from-literal=token=YOUR_TOKEN\n# The weights: the MODEL variable of each Deployment "
              f"({one_line(command.model)}), downloaded once into the volume {cache}.\n{label}")
    return header + "\n---\n".join(docs)


def dns_label(name: str) -> str:
    """``name`` if it is a Kubernetes object name and label value (a DNS-1123 label: at most 63 lower-case letters,
    digits and "-", starting and ending with a letter or digit), else ``ValueError``."""
    if not DNS_LABEL.fullmatch(name):
        raise ValueError(f"{name!r} is not a Kubernetes name (a DNS-1123 label: at most 63 lower-case letters, digits "
                         f"and '-', starting and ending with a letter or digit)")
    return name


@dataclass(frozen=True)
class Pod:
    """What every server pod of a manifest holds: its GPUs, the checkpoint it loads, the node label it is placed
    by ((key, value), or None), its model cache claim and the TensorRT-LLM options file ("" for none)."""

    resource: str
    gpus: int
    model: str
    node_selector: tuple[str, str] | None
    cache: str
    extra_yaml: str


def node_selector(gpu: str) -> tuple[str, str] | None:
    """(label, value) that places a pod on ``gpu``'s nodes (``node_labels.csv``), or None when none is known."""
    table = load_table("node_labels")
    if gpu not in table.index:
        return None
    return str(table.loc[gpu, "label"]), str(table.loc[gpu, "value"])


def cache_gib(plan: dict, scenario: Scenario) -> int:
    """The model cache volume's size (GiB): the plan's weights with ``CACHE_HEADROOM``, whole GiB."""
    server = dataclasses.replace(scenario.server, step_model="roofline", gpu=plan["gpu"], quant=plan["quant"],
                                 expert_parallel=False, attention_data_parallel=False)
    weights = peak_profile(server, 1).resident_weight_bytes / GIB
    return max(1, math.ceil(weights * CACHE_HEADROOM))


def shape_text(plan: dict) -> str:
    split = bool(plan.get("expert_parallel"))
    return parallel_label(plan["tensor_parallel"], split, split)


def _deployment(app: str, replicas: int, image: str, argv: list[str], pod: Pod) -> str:
    args = "\n".join(f"            - {json.dumps(word)}" for word in argv)
    mounts = (f"\n          volumeMounts:\n            - {{name: shm, mountPath: /dev/shm}}"
              f"\n            - {{name: model-cache, mountPath: {CACHE_PATH}}}"
              + (f"\n            - {{name: model-cache, mountPath: {MODELS_PATH}, subPath: models, readOnly: true}}"
                 if pod.model.startswith(MODELS_PATH + "/") else "")
              + ("\n            - {name: options, mountPath: /workspace/extra-llm-api-options.yaml, "
                 "subPath: extra-llm-api-options.yaml}" if pod.extra_yaml else ""))
    volumes = ("\n        - {name: shm, emptyDir: {medium: Memory}}"
               f"\n        - {{name: model-cache, persistentVolumeClaim: {{claimName: {pod.cache}}}}}"
               + (f"\n        - {{name: options, configMap: {{name: {app}-options}}}}" if pod.extra_yaml else ""))
    options = (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {app}-options\ndata:\n"
               f"  extra-llm-api-options.yaml: |\n" + "\n".join(f"    {line}" for line in pod.extra_yaml.splitlines())
               + "\n---\n") if pod.extra_yaml else ""
    placed = (f"      nodeSelector: {{{json.dumps(pod.node_selector[0])}: {json.dumps(pod.node_selector[1])}}}\n"
              if pod.node_selector else "")
    return (f"{options}apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {app}\nspec:\n  replicas: {replicas}\n"
            f"  selector:\n    matchLabels: {{app: {app}}}\n  template:\n    metadata:\n      labels: {{app: {app}}}\n"
            f"    spec:\n{placed}      containers:\n        - name: server\n          image: {image}\n"
            f"          workingDir: /workspace\n          command:\n{args}\n"
            f"          env:\n            - {{name: MODEL, value: {json.dumps(pod.model)}}}\n"
            f"            - {{name: HF_HOME, value: {CACHE_PATH}}}\n"
            f"            - name: HF_TOKEN\n              valueFrom: "
            f"{{secretKeyRef: {{name: {TOKEN_SECRET}, key: token, optional: true}}}}\n"
            f"          ports:\n            - {{containerPort: {PORT}}}\n"
            f"          resources:\n            limits: {{{pod.resource}: {pod.gpus}}}\n"
            f"          readinessProbe:\n            httpGet: {{path: /health, port: {PORT}}}\n"
            f"            periodSeconds: 10\n            failureThreshold: 60{mounts}\n      volumes:{volumes}\n")


def _cache_claim(name: str, gib: int) -> str:
    """The model cache every server pod mounts (ReadWriteMany: the weights downloaded once for all of them)."""
    return (f"apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\nspec:\n"
            f"  accessModes: [ReadWriteMany]\n  resources:\n    requests: {{storage: {gib}Gi}}\n")


def _service(name: str, app: str) -> str:
    return (f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector: {{app: {app}}}\n"
            f"  ports:\n    - {{port: {PORT}, targetPort: {PORT}}}\n")


def model_line(default: str) -> str:
    """The launch scripts' line that sets ``$MODEL``: the caller's value where one is set, else ``default`` in single
    quotes (never inside double quotes, where $(...), backticks and $VAR would run or expand)."""
    return f'[ -n "${{MODEL:-}}" ] || MODEL={shlex.quote(default)}'


def engine_versions(files: dict[str, str], gpu: str) -> list[str]:
    """"vLLM v0.24.0", ... for each engine with a launch script among ``files``, at the release it runs on ``gpu``."""
    return [f"{ENGINE_NAMES[e]} {version_text(e, gpu)}" for e in RECIPE_ENGINES if f"launch-{e}.sh" in files]


def recipe_files(plan: dict, scenario: Scenario) -> dict[str, str]:
    """The recipe as files: one launch script per engine (and TensorRT-LLM's options file), the Kubernetes
    manifest and a README saying what each is, which checkpoint MODEL names, what priced the plan's step times and
    what the engines cannot take as a flag."""
    files = {}
    built = commands(plan, scenario)
    weights = checkpoint(plan, scenario)
    for command in built:
        script = f"launch-{command.engine}.sh"
        named = f"{ENGINE_NAMES[command.engine]} {version_text(command.engine, plan['gpu'])}"
        files[script] = (f"#!/bin/sh\n# {named}: one server of {shape_text(plan)} {one_line(plan['gpu'])}; run "
                         f"{plan['replicas']} of them. MODEL: the checkpoint it loads.\n"
                         f"{model_line(command.model)}\n{command.shell()}\n")
        if command.extra_yaml:
            files["extra-llm-api-options.yaml"] = command.extra_yaml + "\n"
    files["kubernetes.yaml"] = manifest(plan, scenario)
    priced = plan.get("step_times_detail") or plan.get("step_times")
    files["README.txt"] = (
        f"Deployment recipe: {plan['replicas']} x {shape_text(plan)} {one_line(plan['gpu'])} "
        f"({counted(plan['cards'], 'card')}) serving {one_line(scenario.server.model)} with "
        f"{format_label(plan['quant'])} weights.\n\n"
        f"MODEL (each script's variable, and the Deployments' environment) names the checkpoint: "
        f"{one_line(weights.repo)} by "
        f"default" + (", quantized to FP8 by vLLM and SGLang as they load it" if weights.quantize_fp8 else "")
        + ". Set it to another copy of the same weights to use that.\n\n"
        + "".join(f"- launch-{e}.sh: one server under {name}\n" for e, name in zip(
            [e for e in RECIPE_ENGINES if f"launch-{e}.sh" in files], engine_versions(files, plan["gpu"])))
        + "- kubernetes.yaml: the fleet as Deployments and a Service, with a model cache volume\n\n"
        + (f"The plan's step times: {one_line(priced)}.\n\n" if priced else "")
        + "\n".join(dict.fromkeys(one_line(n) for c in built for n in c.notes)) + "\n")
    return files
