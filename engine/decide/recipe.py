"""A plan as something to deploy: the launch command of each serving engine, at a named version, and a Kubernetes
manifest for the fleet.

For a priced plan (``planner.plan_entry``) on its scenario: the command that starts one server of the plan's shape
under vLLM, SGLang and TensorRT-LLM (tensor, expert and attention data-parallel sizes, most sequences, token budget
per iteration, KV-cache format, prefix caching, speculative decoding, the share of GPU memory), each flag as the
engine's command line documents it at ``ENGINE_VERSIONS`` (the test suite checks every flag against the engine's own
source at that release), and a Deployment and Service with the plan's replicas and GPU requests, on the scenario's
engine (for a disaggregated plan a prefill and a decode Deployment, on SGLang, whose command line documents the
split). What the engines cannot take as a flag is said beside the command: the plan's scheduling policy and router
are the simulator's; the engines order requests first come, first served (vLLM also by a priority the client sends),
and a Kubernetes Service spreads connections, not requests.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from ..hardware.tables import gpu_row, is_slice, load_table
from ..scenario.config import Scenario
from ..scenario.labels import parallel_label, words
from ..sim.policies import POLICY_LABELS

ENGINE_VERSIONS = {"vllm": "v0.11.0", "sglang": "v0.5.23", "tensorrt-llm": "1.0.0"}  # the documented CLIs emitted
IMAGES = {"vllm": "vllm/vllm-openai:v0.11.0", "sglang": "lmsysorg/sglang:v0.5.23",
          "tensorrt-llm": "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"}  # the engines' published images of them
ROCM_IMAGE = "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"  # AMD's ROCm build of vLLM nearest v0.11.0 (a patch later)
PORT = 8000
RECIPE_ENGINES = ("vllm", "sglang", "tensorrt-llm")
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM"}
TOKEN_SECRET = "hf-token"  # the Kubernetes secret holding a Hugging Face token (key "token"), for gated models
AMD_VENDOR = "amd"
KV_DTYPES = {"vllm": {"fp8": "fp8"}, "sglang": {"fp8": "fp8_e4m3"}, "tensorrt-llm": {"fp8": "fp8"}}  # else auto
TRT_CAVEAT = ("TensorRT-LLM: its flags were checked against its source of August 2025 (main at 4c05a74, before 1.0.0, "
              "whose source could not be read) and the options file's keys against its documentation's examples: "
              "check both with `trtllm-serve --help` of the release you run.")
FP8_WEIGHTS = ("fp8",)  # weight formats an engine quantizes a 16-bit checkpoint to at load time
FIRST_COME_POLICIES = ("fifo", "vllm-fcfs")  # the engines' own order: nothing to put in front of them


@dataclass(frozen=True)
class Command:
    """One engine's launch command: the program, its (flag, value) pairs in order (value None: a switch), the
    extra YAML file it reads (TensorRT-LLM), and what the reader must know."""

    engine: str
    program: tuple[str, ...]
    flags: tuple[tuple[str, str | None], ...]
    extra_yaml: str = ""
    notes: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The command as argument words."""
        words = list(self.program)
        for flag, value in self.flags:
            words += [flag] if value is None else [flag, value]
        return words

    def shell(self) -> str:
        """The command as one shell line, each flag on its own continued line."""
        lines = [" ".join(shlex.quote(w) for w in self.program)]
        lines += [f"  {flag}" if value is None else f"  {flag} {shlex.quote(value)}" for flag, value in self.flags]
        return " \\\n".join(lines)


def model_repo(scenario: Scenario) -> str:
    """Where the served model's weights come from: its Hugging Face repository, or (a model of the user's own
    config.json) a path to fill in."""
    server = scenario.server
    models = load_table("models")
    if server.own_model is None and server.model in models.index:
        return str(models.loc[server.model, "hf_repo"])
    return f"/models/{server.model}"


def vendor(gpu: str) -> str:
    """"amd" for an Instinct card, else "nvidia" (the Kubernetes resource and images differ)."""
    return AMD_VENDOR if str(gpu_row(gpu)["family"]).startswith("cdna") else "nvidia"


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
    repo = model_repo(scenario)
    kv = server.kv_quant
    fp8_weights = plan["quant"] in FP8_WEIGHTS
    speculative = plan["decoding"] == "speculative" and server.speculative is not None
    draft = None
    if speculative and server.speculative.draft_model:
        draft = str(load_table("models").loc[server.speculative.draft_model, "hf_repo"])
    k = server.speculative.draft_tokens if speculative else 0
    notes = [_policy_note(plan)]
    if plan["quant"] not in ("fp16", "bf16", *FP8_WEIGHTS):
        notes.append(f"Weights in {plan['quant']}: point MODEL at a checkpoint of {server.model} already quantized to "
                     f"that format (the engines read its format from the checkpoint).")
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
    out.append(Command("vllm", ("vllm", "serve", repo), tuple(vllm), notes=tuple(notes)))

    sglang = [("--model-path", repo), ("--host", "0.0.0.0"), ("--port", str(PORT)), ("--tp-size", str(cards))]
    sglang += [("--attn-dp-size", str(cards)), ("--ep-size", str(cards))] if split else []
    sglang += [("--max-running-requests", str(server.max_batch_size)),
               ("--chunked-prefill-size", str(server.max_batched_tokens)),
               ("--mem-fraction-static", f"{server.gpu_memory_utilization:g}"),
               ("--kv-cache-dtype", KV_DTYPES["sglang"].get(kv, "auto"))]
    sglang += [] if server.prefix_caching else [("--disable-radix-cache", None)]
    sglang += [("--quantization", "fp8")] if fp8_weights else []
    if speculative and draft:
        sglang += [("--speculative-algorithm", "STANDALONE"), ("--speculative-draft-model-path", draft),
                   ("--speculative-num-steps", str(k)), ("--speculative-eagle-topk", "1"),
                   ("--speculative-num-draft-tokens", str(k + 1))]
    out.append(Command("sglang", ("python3", "-m", "sglang.launch_server"), tuple(sglang), notes=tuple(notes)))

    if vendor(plan["gpu"]) != AMD_VENDOR:
        options = {"kv_cache_config": {"dtype": KV_DTYPES["tensorrt-llm"].get(kv, "auto"),
                                       "enable_block_reuse": bool(server.prefix_caching),
                                       "free_gpu_memory_fraction": round(server.gpu_memory_utilization, 3)},
                   "enable_attention_dp": split}
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
        out.append(Command("tensorrt-llm", ("trtllm-serve", repo), tuple(trt), extra_yaml=_yaml(options),
                           notes=tuple(trt_notes)))
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
    docs = []
    for pool, replicas in pools:
        app = f"{name}-{pool}" if pool else name
        argv = command.argv() + (["--disaggregation-mode", pool] if pool else [])
        image = ROCM_IMAGE if amd and engine == "vllm" else IMAGES[engine]
        docs.append(_deployment(app, replicas, image, argv, resource, gpus, command.extra_yaml))
    docs.append(_service(name, f"{name}-{pools[0][0]}" if pools[0][0] else name))
    header = (f"# {plan['replicas']} servers of {shape_text(plan)} {plan['gpu']} on {ENGINE_NAMES[engine]} "
              f"{ENGINE_VERSIONS[engine]}, generated by Scheduler Lab. Gated models (Llama) read a Hugging Face token "
              f"from the secret {TOKEN_SECRET}:\n#   kubectl create secret generic {TOKEN_SECRET} "
              f"--from-literal=token=YOUR_TOKEN\n")
    return header + "\n---\n".join(docs)


def shape_text(plan: dict) -> str:
    split = bool(plan.get("expert_parallel"))
    return parallel_label(plan["tensor_parallel"], split, split)


def _deployment(app: str, replicas: int, image: str, argv: list[str], resource: str, gpus: int,
                extra_yaml: str) -> str:
    args = "\n".join(f"            - {json.dumps(word)}" for word in argv)
    config = ("\n          volumeMounts:\n            - {name: shm, mountPath: /dev/shm}"
              "\n            - {name: options, mountPath: /workspace/extra-llm-api-options.yaml, "
              "subPath: extra-llm-api-options.yaml}" if extra_yaml else
              "\n          volumeMounts:\n            - {name: shm, mountPath: /dev/shm}")
    volumes = ("\n        - {name: shm, emptyDir: {medium: Memory}}"
               + (f"\n        - {{name: options, configMap: {{name: {app}-options}}}}" if extra_yaml else ""))
    options = (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {app}-options\ndata:\n"
               f"  extra-llm-api-options.yaml: |\n" + "\n".join(f"    {line}" for line in extra_yaml.splitlines())
               + "\n---\n") if extra_yaml else ""
    return (f"{options}apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {app}\nspec:\n  replicas: {replicas}\n"
            f"  selector:\n    matchLabels: {{app: {app}}}\n  template:\n    metadata:\n      labels: {{app: {app}}}\n"
            f"    spec:\n      containers:\n        - name: server\n          image: {image}\n"
            f"          workingDir: /workspace\n          command:\n{args}\n"
            f"          env:\n            - name: HF_TOKEN\n              valueFrom: "
            f"{{secretKeyRef: {{name: {TOKEN_SECRET}, key: token, optional: true}}}}\n"
            f"          ports:\n            - {{containerPort: {PORT}}}\n"
            f"          resources:\n            limits: {{{resource}: {gpus}}}\n"
            f"          readinessProbe:\n            httpGet: {{path: /health, port: {PORT}}}\n"
            f"            periodSeconds: 10\n            failureThreshold: 60{config}\n      volumes:{volumes}\n")


def _service(name: str, app: str) -> str:
    return (f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector: {{app: {app}}}\n"
            f"  ports:\n    - {{port: {PORT}, targetPort: {PORT}}}\n")


def engine_versions(files: dict[str, str]) -> list[str]:
    """"vLLM v0.11.0", ... for each engine with a launch script among ``files``."""
    return [f"{ENGINE_NAMES[e]} {ENGINE_VERSIONS[e]}" for e in RECIPE_ENGINES if f"launch-{e}.sh" in files]


def recipe_files(plan: dict, scenario: Scenario) -> dict[str, str]:
    """The recipe as files: one launch script per engine (and TensorRT-LLM's options file), the Kubernetes
    manifest and a README saying what each is and what the engines cannot take as a flag."""
    files = {}
    for command in commands(plan, scenario):
        script = f"launch-{command.engine}.sh"
        named = f"{ENGINE_NAMES[command.engine]} {ENGINE_VERSIONS[command.engine]}"
        files[script] = (f"#!/bin/sh\n# {named}: one server of {shape_text(plan)} {plan['gpu']}; run "
                         f"{plan['replicas']} of them\n{command.shell()}\n")
        if command.extra_yaml:
            files["extra-llm-api-options.yaml"] = command.extra_yaml + "\n"
    files["kubernetes.yaml"] = manifest(plan, scenario)
    files["README.txt"] = (
        f"Deployment recipe: {plan['replicas']} x {shape_text(plan)} {plan['gpu']} ({plan['cards']} cards) serving "
        f"{scenario.server.model} with {plan['quant']} weights.\n\n"
        + "".join(f"- launch-{e}.sh: one server under {ENGINE_NAMES[e]} {ENGINE_VERSIONS[e]}\n" for e in RECIPE_ENGINES
                  if f"launch-{e}.sh" in files)
        + "- kubernetes.yaml: the fleet as Deployments and a Service\n\n"
        + "\n".join(dict.fromkeys(n for c in commands(plan, scenario) for n in c.notes)) + "\n")
    return files
