"""The deployment recipe (engine.decide.recipe): every flag it emits is one its engine documents at the named version
(the flag lists read from each engine's source at that release tag, tests/fixtures/engine_flags), the commands
carry the plan's shape and the scenario's server settings, and the manifest is YAML a cluster takes: the plan's
replicas, its GPUs per pod, a Service over them. Names a shared link sets (an own model's) stay data: run with sh in a
sandbox, no launch script runs anything a name says, and no name adds a line to a script, the manifest or the README."""

import json
import re
import shlex
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

import engine
from conftest import REPO
from engine.cli import main
from engine.decide.recipe import (ENGINE_VERSIONS, ROCM_IMAGE, checkpoint, commands, manifest, model_line, one_line,
                                  recipe_files)
from engine.hardware.hf_config import user_model_overrides
from engine.hardware.tables import load_table
from engine.scenario.config import apply_overrides, read_toml

FLAGS = REPO / "tests" / "fixtures" / "engine_flags"
FLAG_FILES = {"vllm": "vllm.txt", "sglang": "sglang.txt", "tensorrt-llm": "trtllm-serve.txt"}
ARTICLE = read_toml(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml")


def documented(name: str) -> tuple[str, dict[str, set[str] | None]]:
    """(version, {flag: its documented values, or None for any}) of one fixture file."""
    version, flags = "", {}
    for line in (FLAGS / name).read_text().splitlines():
        if line.startswith("# version:"):
            version = line.split(":", 1)[1].strip()
        elif line and not line.startswith("#"):
            flag, _, values = line.partition(" ")
            flags[flag] = set(values.strip("{}").split(",")) if values else None
    return version, flags


def plan_of(**changes) -> dict:
    return {"gpu": "H100-80G", "tensor_parallel": 4, "expert_parallel": False, "replicas": 10, "cards": 40,
            "quant": "fp16", "decoding": "plain", "policy": {"name": "fifo"}, "router": "least-tokens", **changes}


def scenario_of(**overrides) -> engine.Scenario:
    return engine.load_scenario(apply_overrides(ARTICLE, overrides))


SHAPES = [
    (plan_of(), {}),
    (plan_of(expert_parallel=True, tensor_parallel=8, cards=80, quant="fp8"),
     {"server.model": "Qwen3-235B-A22B", "server.kv_quant": "fp8", "server.prefix_caching": True}),
    (plan_of(decoding="speculative"),
     {"server.speculative": {"draft_model": "Llama-3.2-1B", "draft_tokens": 4, "acceptance": 0.7}}),
]


@pytest.mark.parametrize("plan, overrides", SHAPES)
def test_every_emitted_flag_is_documented_by_its_engine_at_the_named_version(plan, overrides):
    for command in commands(plan, scenario_of(**overrides)):
        version, flags = documented(FLAG_FILES[command.engine])
        assert version.split()[0] == ENGINE_VERSIONS[command.engine], "the fixture is the version the recipe names"
        for flag, value in command.flags:
            assert flag in flags, f"{command.engine} {version} has no {flag}"
            if value is not None and flags[flag] is not None:
                assert value in flags[flag], f"{command.engine} {flag} {value} is not one of {flags[flag]}"
        if command.extra_yaml:
            keys = set(documented("trtllm-llm-api-options.txt")[1])
            options = yaml.safe_load(command.extra_yaml)
            for top, value in options.items():
                named = [f"{top}.{k}" for k in value] if isinstance(value, dict) else [top]
                assert set(named) <= keys, set(named) - keys


def test_the_commands_carry_the_plans_shape_and_the_servers_settings():
    scenario = scenario_of(**{"server.max_batch_size": 128, "server.max_batched_tokens": 4096,
                              "server.gpu_memory_utilization": 0.85})
    by_engine = {c.engine: dict(c.flags) for c in commands(plan_of(), scenario)}
    assert by_engine["vllm"]["--tensor-parallel-size"] == "4" and by_engine["vllm"]["--max-num-seqs"] == "128"
    assert by_engine["vllm"]["--max-num-batched-tokens"] == "4096"
    assert by_engine["vllm"]["--gpu-memory-utilization"] == "0.85"
    assert "--no-enable-prefix-caching" in by_engine["vllm"], "the plan was sized without a prefix cache"
    assert by_engine["sglang"]["--tp-size"] == "4" and by_engine["sglang"]["--max-running-requests"] == "128"
    assert "--disable-radix-cache" in by_engine["sglang"]
    assert by_engine["tensorrt-llm"]["--tp_size"] == "4" and by_engine["tensorrt-llm"]["--max_batch_size"] == "128"


def test_expert_parallel_attention_data_parallel_and_an_fp8_cache_are_spelled_per_engine():
    scenario = scenario_of(**{"server.model": "Qwen3-235B-A22B", "server.kv_quant": "fp8",
                              "server.prefix_caching": True})
    built = {c.engine: c for c in commands(plan_of(expert_parallel=True, tensor_parallel=8), scenario)}
    vllm, sglang, trt = (dict(built[e].flags) for e in ("vllm", "sglang", "tensorrt-llm"))
    assert (vllm["--tensor-parallel-size"], vllm["--data-parallel-size"]) == ("1", "8")
    assert "--enable-expert-parallel" in vllm and vllm["--kv-cache-dtype"] == "fp8"
    assert "--enable-prefix-caching" in vllm
    assert (sglang["--tp-size"], sglang["--dp-size"], sglang["--ep-size"]) == ("8", "8", "8")
    assert "--enable-dp-attention" in sglang
    assert "--disable-radix-cache" not in sglang and sglang["--kv-cache-dtype"] == "fp8_e4m3"
    assert (trt["--tp_size"], trt["--ep_size"]) == ("8", "8")
    options = yaml.safe_load(built["tensorrt-llm"].extra_yaml)
    assert options["enable_attention_dp"] is True and options["kv_cache_config"]["dtype"] == "fp8"
    assert options["kv_cache_config"]["enable_block_reuse"] is True


def test_speculative_decoding_names_the_draft_and_its_tokens():
    scenario = scenario_of(**{"server.speculative": {"draft_model": "Llama-3.2-1B", "draft_tokens": 4,
                                                     "acceptance": 0.7}})
    vllm = dict(commands(plan_of(decoding="speculative"), scenario)[0].flags)
    assert json.loads(vllm["--speculative-config"]) == {"num_speculative_tokens": 4,
                                                        "model": "meta-llama/Llama-3.2-1B-Instruct"}
    plain = dict(commands(plan_of(decoding="plain"), scenario)[0].flags)
    assert "--speculative-config" not in plain, "a plain plan decodes plainly even when the scenario could speculate"


def test_the_manifest_is_the_plans_fleet():
    docs = [d for d in yaml.safe_load_all(manifest(plan_of(), scenario_of())) if d]
    claim, deployment, service = docs
    assert claim["kind"] == "PersistentVolumeClaim"
    assert deployment["kind"] == "Deployment" and deployment["spec"]["replicas"] == 10
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert container["command"][:3] == ["vllm", "serve", "$(MODEL)"]
    assert {"name": "MODEL", "value": "meta-llama/Meta-Llama-3-70B-Instruct"} in container["env"]
    assert container["image"].endswith(ENGINE_VERSIONS["vllm"])
    assert service["kind"] == "Service" and service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_a_disaggregated_plan_deploys_a_prefill_and_a_decode_pool():
    plan = plan_of(replicas=6, prefill_replicas=2, decode_replicas=4)
    docs = [d for d in yaml.safe_load_all(manifest(plan, scenario_of())) if d]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert {n: d["spec"]["replicas"] for n, d in deployments.items()} == {"llm-prefill": 2, "llm-decode": 4}
    for pool, d in deployments.items():
        command = d["spec"]["template"]["spec"]["containers"][0]["command"]
        assert command[command.index("--disaggregation-mode") + 1] == pool.split("-")[1]
    assert "--disaggregation-mode" in documented(FLAG_FILES["sglang"])[1]


def test_an_amd_plan_has_no_tensorrt_llm_command_and_requests_amd_gpus():
    plan = plan_of(gpu="MI300X", tensor_parallel=2, cards=20)
    assert [c.engine for c in commands(plan, scenario_of())] == ["vllm", "sglang"]
    deployment = next(d for d in yaml.safe_load_all(manifest(plan, scenario_of())) if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"amd.com/gpu": 2} and container["image"] == ROCM_IMAGE


def test_the_launch_scripts_are_the_commands_as_shell_lines():
    files = recipe_files(plan_of(), scenario_of())
    assert set(files) == {"launch-vllm.sh", "launch-sglang.sh", "launch-tensorrt-llm.sh",
                          "extra-llm-api-options.yaml", "kubernetes.yaml", "README.txt"}
    for command in commands(plan_of(), scenario_of()):
        script = files[f"launch-{command.engine}.sh"]
        assert f'\n[ -n "${{MODEL:-}}" ] || MODEL={shlex.quote(command.model)}\n' in script, "the checkpoint by default"
        body = script.split("\n", 3)[3].replace("\\\n", " ")
        assert shlex.split(body.replace('"$MODEL"', command.model)) == command.argv()
    assert "first come, first served" in files["README.txt"] or "request-level router" in files["README.txt"]


def test_plan_writes_the_recipe_of_its_recommendation(tmp_path, capsys):
    folder = tmp_path / "recipe"
    status = main(["plan", str(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"), "--target",
                   "interactive.ttft_p99_ms=1000", "--gpus", "H100-80G", "--seeds", "2", "--requests", "400",
                   "--recipe", str(folder)])
    assert status == 0
    assert sorted(p.name for p in folder.iterdir()) == sorted(["launch-vllm.sh", "launch-sglang.sh",
                                                               "launch-tensorrt-llm.sh", "extra-llm-api-options.yaml",
                                                               "kubernetes.yaml", "README.txt"])
    assert "recipe: launch-vllm.sh" in capsys.readouterr().err


def test_a_tensorrt_llm_fleet_mounts_its_options_file_from_a_config_map():
    docs = [d for d in yaml.safe_load_all(manifest(plan_of(), scenario_of(**{"server.engine": "tensorrt-llm"}))) if d]
    config_map, deployment = (next(d for d in docs if d["kind"] == kind) for kind in ("ConfigMap", "Deployment"))
    assert config_map["kind"] == "ConfigMap"
    assert yaml.safe_load(config_map["data"]["extra-llm-api-options.yaml"])["kv_cache_config"]["dtype"] == "auto"
    pod = deployment["spec"]["template"]["spec"]
    assert {"name": "options", "configMap": {"name": "llm-options"}} in pod["volumes"]
    assert pod["containers"][0]["command"][:2] == ["trtllm-serve", "$(MODEL)"]


def test_a_policy_the_engines_lack_is_said_beside_the_commands():
    fcfs = recipe_files(plan_of(policy={"name": "vllm-fcfs"}), scenario_of())["README.txt"]
    assert "gateway" not in fcfs and "request-level router" in fcfs, "vLLM's own order needs nothing in front"
    wfq = recipe_files(plan_of(policy={"name": "wfq"}), scenario_of())["README.txt"]
    assert "put the policy in a gateway" in wfq and "wfq" not in wfq, "named in words, not by its code"


@pytest.mark.parametrize("model, quant, repo, quantize, said", [
    ("Llama-3.3-70B", "fp8", "nvidia/Llama-3.3-70B-Instruct-FP8", False, ""),
    ("Llama-3.3-70B", "nvfp4", "nvidia/Llama-3.3-70B-Instruct-FP4", False, ""),
    ("Llama-3-70B", "fp8", "meta-llama/Meta-Llama-3-70B-Instruct", True, ""),  # no FP8 release: quantized at load
    ("Llama-3-70B", "int4", "meta-llama/Meta-Llama-3-70B-Instruct", False, "No published INT4 checkpoint"),
    ("DeepSeek-R1", "fp8", "deepseek-ai/DeepSeek-R1", False, ""),  # R1's own weights, not V3's
    ("DeepSeek-V3", "fp8", "deepseek-ai/DeepSeek-V3", False, ""),
    ("DeepSeek-R1", "bf16", "deepseek-ai/DeepSeek-R1", False, "set MODEL to a BF16 copy"),
])
def test_model_defaults_to_a_published_checkpoint_of_the_plans_format(model, quant, repo, quantize, said):
    weights = checkpoint(plan_of(quant=quant), scenario_of(**{"server.model": model}))
    assert (weights.repo, weights.quantize_fp8) == (repo, quantize)
    assert said in weights.note and (said or not weights.note)
    vllm = dict(commands(plan_of(quant=quant), scenario_of(**{"server.model": model}))[0].flags)
    assert ("--quantization" in vllm) == quantize, "a checkpoint of the format carries it: no flag"


def test_every_listed_checkpoint_names_a_model_and_a_weight_format_of_the_tables():
    table = load_table("checkpoints")
    assert set(table.index) <= set(load_table("models").index)
    assert set(table["quant"]) <= set(load_table("quant").index)
    assert not table.reset_index().duplicated(["model", "quant"]).any()


def test_your_own_models_recipe_reads_its_folder_and_says_so():
    data = apply_overrides(ARTICLE, user_model_overrides(json.loads(
        (REPO / "tests" / "fixtures" / "model_configs" / "Llama-3.1-8B.json").read_text()), "config", name="acme 8b"))
    files = recipe_files(plan_of(tensor_parallel=1, cards=10), engine.load_scenario(data))
    assert '|| MODEL=/models/acme-8b\n' in files["launch-vllm.sh"]
    assert "your model acme 8b" in files["README.txt"] and "/models/config" not in "".join(files.values())
    pods = [d["spec"]["template"]["spec"] for d in yaml.safe_load_all(files["kubernetes.yaml"])
            if d and d["kind"] == "Deployment"]
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert env["MODEL"] == "/models/acme-8b" and mounts["/models"]["subPath"] == "models", \
            "the folder MODEL names is mounted in the pod (the cache volume's models folder)"
        assert mounts["/models"]["name"] in {v["name"] for v in pod["volumes"]}
    assert "copy the folder into the model cache volume as models/acme-8b" in files["README.txt"]
    published = recipe_files(plan_of(tensor_parallel=1, cards=10), engine.load_scenario(ARTICLE))["kubernetes.yaml"]
    assert "mountPath: /models" not in published, "a published checkpoint is downloaded, not mounted"


@pytest.mark.parametrize("plan, overrides", [*SHAPES, (plan_of(replicas=6, prefill_replicas=2, decode_replicas=4), {}),
                                             (plan_of(gpu="MI300X", tensor_parallel=2, cards=20), {}),
                                             (plan_of(), {"server.engine": "tensorrt-llm"})])
def test_the_manifest_validates_against_the_kubernetes_schemas_and_the_scripts_parse(plan, overrides, tmp_path):
    """Each document against Kubernetes 1.31's OpenAPI schemas (kubernetes-validate, strict: no unknown field), and
    each launch script through the shell's parser (sh -n)."""
    files = recipe_files(plan, scenario_of(**overrides))
    for doc in yaml.safe_load_all(files["kubernetes.yaml"]):
        kubernetes_validate.validate(doc, "1.31.0", strict=True)
    for name, text in files.items():
        if name.endswith(".sh"):
            script = tmp_path / name
            script.write_text(text)
            assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0, name


def test_the_pods_are_placed_on_the_plans_gpu_and_share_a_model_cache():
    docs = [d for d in yaml.safe_load_all(manifest(plan_of(quant="fp8"), scenario_of())) if d]
    claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in pod["volumes"]
    # Llama-3-70B: 72.7e9 FP8 weights with the embeddings = 67.7 GiB, x 1.25 = 84.6 -> 85 GiB
    assert claim["spec"]["resources"]["requests"]["storage"] == "85Gi"
    unknown = manifest(plan_of(gpu="MI300X", tensor_parallel=2, cards=20), scenario_of())
    assert "No node label is known for MI300X" in unknown and "nodeSelector:" not in unknown



# Own models' names as a shared link may set them: each tries to run `touch PWNED` (or id) where it is written.
HOSTILE_NAMES = ["Mine$(touch${IFS}PWNED)", "a`touch PWNED`b", '"; rm -rf ~; touch PWNED; "', "$HOME", "it's 'mine'",
                 "x\ntouch PWNED", "x\rtouch PWNED", "x\u2028touch PWNED", "x\x85touch PWNED", "!@#$%^&*()", "..",
                 "x\x0bid\x0c\x1c\u2029y"]
CALLER_MODEL = "/data/$(touch PWNED) `id` it's"  # a $MODEL the one who runs a script sets: passed on as it is
FAKE_ENGINE = '#!/bin/sh\nfor word in "$@"; do printf "%s\\0" "$word"; done > "$ARGV_DIR/${0##*/}"\n'  # its words
CANARY = '#!/bin/sh\n: > "$ARGV_DIR/RAN-${0##*/}"\n'  # a command a name would run: it leaves a mark
SANDBOX_PROGRAMS = {"vllm": FAKE_ENGINE, "python3": FAKE_ENGINE, "trtllm-serve": FAKE_ENGINE, "touch": CANARY,
                    "rm": CANARY, "id": CANARY}
SCRIPT_PROGRAMS = {"vllm": "vllm", "sglang": "python3", "tensorrt-llm": "trtllm-serve"}


def own_model_scenario(name: str, **overrides) -> engine.Scenario:
    """The article's scenario serving an own model (a Hugging Face config) named ``name`` as a shared link sets it
    (``server.model`` naming ``server.model_config``)."""
    config = json.loads((REPO / "tests" / "fixtures" / "model_configs" / "Llama-3.1-8B.json").read_text())
    data = apply_overrides(apply_overrides(ARTICLE, overrides), user_model_overrides(config, "config", name=name))
    scenario = engine.load_scenario(data)
    assert scenario.server.model == name and scenario.server.own_model is not None, "the name reaches the recipe"
    return scenario


def run_sandboxed(text: str, folder, model: str | None = None) -> tuple[subprocess.CompletedProcess, dict, list]:
    """Run launch script ``text`` with sh, its working directory and HOME ``folder/home``, its PATH only fake engines
    (each writes the words it received to ``folder/argv/PROGRAM``) and canaries (touch, rm, id: each writes
    ``folder/argv/RAN-NAME``): (the run, {program: its words}, what is left in home)."""
    bin_dir, argv_dir, home = folder / "bin", folder / "argv", folder / "home"
    for made in (bin_dir, argv_dir, home):
        made.mkdir(parents=True)
    for program, body in SANDBOX_PROGRAMS.items():
        (bin_dir / program).write_text(body)
        (bin_dir / program).chmod(0o755)
    (folder / "launch.sh").write_text(text)
    env = {"PATH": str(bin_dir), "HOME": str(home), "ARGV_DIR": str(argv_dir), **({"MODEL": model} if model else {})}
    done = subprocess.run([shutil.which("sh"), str(folder / "launch.sh")], cwd=home, env=env, capture_output=True,
                          text=True, timeout=30)
    received = {p.name: p.read_bytes().decode().split("\0")[:-1] for p in argv_dir.iterdir()}  # "\r" as it is
    return done, received, sorted(p.name for p in home.iterdir())


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=ascii)
def test_a_hostile_own_model_name_runs_nothing_in_the_launch_scripts(name, tmp_path):
    """Each launch script, run with sh, hands its engine the words of its command exactly: MODEL by default a folder
    of safe characters only, else the caller's MODEL as it is; nothing a name says runs, nothing is written."""
    scenario = own_model_scenario(name)
    plan = plan_of(tensor_parallel=1, cards=10, quant="fp8")
    files = recipe_files(plan, scenario)
    built = {c.engine: c for c in commands(plan, scenario)}
    default = checkpoint(plan, scenario).repo
    assert {c.model for c in built.values()} == {default}
    for engine_name, program in SCRIPT_PROGRAMS.items():
        text = files[f"launch-{engine_name}.sh"]
        for model in (None, CALLER_MODEL):
            folder = tmp_path / f"{engine_name}-{'caller' if model else 'default'}"
            done, received, left = run_sandboxed(text, folder, model)
            assert (done.returncode, done.stderr, left) == (0, "", []), engine_name
            assert received == {program: built[engine_name].argv(model)[1:]}, "the engine's words exactly, no canary"
            assert (model or default) in received[program]
        assert not [p for p in tmp_path.rglob("*") if "PWNED" in p.name or p.name.startswith("RAN-")]
        (tmp_path / "parse.sh").write_text(text)
        assert subprocess.run(["sh", "-n", str(tmp_path / "parse.sh")], capture_output=True).returncode == 0
    assert re.fullmatch(r"/models/[A-Za-z0-9._-]{1,60}", default) and default not in ("/models/.", "/models/..")


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=ascii)
def test_the_model_line_never_expands_its_default(name, tmp_path):
    """Whatever a default holds (a checkpoint named by a table, not only a folder slug), the scripts' MODEL line
    takes it as it is, and a caller's MODEL over it."""
    default = f"/models/{name}"
    script = f"#!/bin/sh\n{model_line(default)}\nvllm \"$MODEL\"\n"
    for model in (None, CALLER_MODEL):
        done, received, left = run_sandboxed(script, tmp_path / ("caller" if model else "default"), model)
        assert (done.returncode, done.stderr, left, received) == (0, "", [], {"vllm": [model or default]})


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=ascii)
@pytest.mark.parametrize("server_engine", ["vllm", "tensorrt-llm"])
def test_a_hostile_own_model_name_stays_data_in_the_manifest_and_the_readme(name, server_engine):
    """No generated file gains a line over a plain name's (each name in a comment or the README is one line); the
    manifest validates, its names are DNS-1123 labels, its MODEL the safe folder as a string."""
    plan = plan_of(tensor_parallel=1, cards=10, quant="fp8")
    scenario = own_model_scenario(name, **{"server.engine": server_engine})
    hostile = recipe_files(plan, scenario)
    plain = recipe_files(plan, own_model_scenario("acme", **{"server.engine": server_engine}))
    default = checkpoint(plan, scenario).repo
    assert set(hostile) == set(plain)
    for file, text in hostile.items():
        assert len(text.splitlines()) == len(plain[file].splitlines()), f"{file} gained a line"
    docs = [d for d in yaml.safe_load_all(hostile["kubernetes.yaml"]) if d]
    assert [d["kind"] for d in docs] == [d["kind"] for d in yaml.safe_load_all(plain["kubernetes.yaml"]) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.31.0", strict=True)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", doc["metadata"]["name"])
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "MODEL", "value": default} in container["env"] and "$(MODEL)" in container["command"]
    header = hostile["kubernetes.yaml"].split("\napiVersion:", 1)[0].splitlines()
    assert header and all(line.startswith("#") for line in header), "the names stay inside the comments"
    assert f"({default})" in header[-1]
    readme = hostile["README.txt"]
    assert f"serving {one_line(name)} with" in readme and f"your model {one_line(name)} with" in readme


def test_one_line_leaves_no_line_break_a_shell_or_yaml_reader_sees():
    breaks = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00\x1b\u202e\x9b"
    text = one_line(f"a{breaks}b")
    assert text == "a" + " " * len(breaks) + "b" and len(text.splitlines()) == 1
    assert yaml.safe_load(f"# {text}\nkey: 1") == {"key": 1}
    assert one_line("Llama-3 8B (your config) ü/é $x") == "Llama-3 8B (your config) ü/é $x", "a plain name as it is"


@pytest.mark.parametrize("name", ["Bad_Name", "LLM", "x-", "-x", "a.b", "x" * 48, "", "llm\n", "a b"])
def test_the_manifests_names_must_be_dns_labels(name):
    """The Deployments' and Service's names and app labels are made from ``name``: each a DNS-1123 label (the
    longest, NAME-prefill-options, at most 63 characters)."""
    with pytest.raises(ValueError, match="DNS-1123"):
        manifest(plan_of(), scenario_of(), name=name)
    longest = manifest(plan_of(replicas=6, prefill_replicas=2, decode_replicas=4), scenario_of(), name="x" * 47)
    for doc in yaml.safe_load_all(longest):
        kubernetes_validate.validate(doc, "1.31.0", strict=True)


def test_one_server_on_one_card_is_said_in_the_singular():
    one = plan_of(tensor_parallel=1, replicas=1, cards=1)
    files = recipe_files(one, scenario_of())
    assert files["kubernetes.yaml"].startswith("# 1 server of ")
    assert "(1 card) serving" in files["README.txt"]
    assert recipe_files(plan_of(), scenario_of())["kubernetes.yaml"].startswith("# 10 servers of ")


def test_an_amd_plan_names_the_vllm_release_its_image_runs():
    """The manifest runs AMD's ROCm build of vLLM on an Instinct card: its header, the vLLM script and the README
    name that release, the one in the image's tag, not the NVIDIA image's."""
    from engine.decide.recipe import ROCM_VLLM_VERSION
    files = recipe_files(plan_of(gpu="MI300X", tensor_parallel=2, cards=20), scenario_of())
    assert ROCM_VLLM_VERSION != ENGINE_VERSIONS["vllm"] and f"_vllm_{ROCM_VLLM_VERSION[1:]}_" in ROCM_IMAGE
    named = f"vLLM {ROCM_VLLM_VERSION} (AMD's ROCm build)"
    assert f"on {named}, generated by" in files["kubernetes.yaml"].splitlines()[0]
    assert files["launch-vllm.sh"].splitlines()[1].startswith(f"# {named}: one server")
    assert f"- launch-vllm.sh: one server under {named}\n" in files["README.txt"]
    assert ENGINE_VERSIONS["vllm"] not in files["kubernetes.yaml"] + files["launch-vllm.sh"] + files["README.txt"]
    nvidia = recipe_files(plan_of(), scenario_of())
    assert f"vLLM {ENGINE_VERSIONS['vllm']}, generated by" in nvidia["kubernetes.yaml"].splitlines()[0]
