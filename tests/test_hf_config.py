"""A model of the user's own from its Hugging Face config.json (``engine.hardware.hf_config``): every size checked by
hand arithmetic against the published parameter counts, windowed layers, one-line errors, and the same results as
the shipped row of the same shape."""

import json
import subprocess
import sys

import pandas as pd
import pytest

import engine
from conftest import REPO
from engine.cli import main
from engine.hardware.hf_config import (CONFIG_MAX_BYTES, model_config_from_hf, model_name, parse_config,
                                       read_config_file, user_model_overrides)
from engine.hardware.roofline import model_shape, peak_profile
from engine.hardware.tables import load_table
from engine.scenario.config import Server, apply_overrides, read_toml, toml_string
from engine.scenario.link import decode, encode

CONFIGS = REPO / "tests" / "fixtures" / "model_configs"
EXAMPLE = read_toml(REPO / "data" / "scenarios" / "example.toml")
SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "experts",
              "experts_per_token", "expert_intermediate", "shared_experts", "dense_layers", "attention", "q_lora_rank",
              "kv_lora_rank", "rope_head_dim", "v_head_dim", "sliding_window", "sliding_layers")


def config(name: str) -> dict:
    return read_config_file(CONFIGS / f"{name}.json")


def shape(name: str):
    row = model_config_from_hf(config(name), name + " (test)")
    return model_shape(pd.Series({**row, "tied_embeddings": int(row["tied_embeddings"])})), row


# (file, published total and active parameters, whether the card's active count has the embedding row, tolerance)
PUBLISHED = [
    ("gpt-oss-120b", 116.83e9, 5.13e9, False, 0.002),  # OpenAI's model card: 116.83B, 5.13B active (biases apart)
    ("gpt-oss-20b", 20.91e9, 3.61e9, False, 0.002),    # 20.91B, 3.61B active
    ("DeepSeek-V3", 671e9, 37e9, True, 0.02),          # arXiv 2412.19437: 671B total, 37B activated (MTP layer apart)
    ("Qwen3-30B-A3B", 30.5e9, 3.3e9, True, 0.02),      # Qwen3 model card: 30.5B total, 3.3B activated
    ("Llama-3.1-8B", 8.03e9, 8.03e9, True, 0.001),     # 8,030,261,248 parameters
    ("Llama-4-Maverick-17B-128E", 400e9, 17e9, True, 0.02),  # Meta: 400B total, 17B active (text part)
]


@pytest.mark.parametrize("name, total, active, with_embedding, tolerance", PUBLISHED)
def test_the_sizes_read_from_a_config_are_the_published_ones(name, total, active, with_embedding, tolerance):
    s, row = shape(name)
    assert s.parameters == pytest.approx(total, rel=tolerance)
    embedding_row = row["vocab"] * row["hidden"] if with_embedding else 0
    assert s.active_matmul_parameters + embedding_row == pytest.approx(active, rel=max(tolerance, 0.02))


def test_gpt_oss_120b_by_hand():
    """36 layers of hidden 2880: attention 2880 x 64 x 64 (Q) + 2 x 2880 x 8 x 64 (K, V) + 64 x 64 x 2880 (O), 128
    experts of 3 x 2880 x 2880 and a router of 2880 x 128, two norms; untied 201,088-token embedding and LM head.
    Only the 18 full-attention layers cache every token (the other 18 keep a 128-token window)."""
    s, row = shape("gpt-oss-120b")
    attention = 2880 * 64 * 64 * 2 + 2 * 2880 * 8 * 64
    expert = 3 * 2880 * 2880
    layer = attention + 128 * expert + 2880 * 128 + 2 * 2880
    assert s.parameters == 36 * layer + 2 * 201088 * 2880 + 2880
    assert s.active_matmul_parameters == 36 * (attention + 4 * expert + 2880 * 128 + 2 * 2880) + 201088 * 2880 + 2880
    assert (row["sliding_window"], row["sliding_layers"]) == (128, 18)
    assert s.kv_values_per_token == 18 * 2 * 8 * 64  # 36,864 B a token in FP16
    assert s.attention_flops_per_context_token == 2 * 18 * 64 * (64 + 64)


def test_a_long_window_counts_as_full_attention():
    """Llama-4's 8,192-token chunks on 36 of 48 layers: every layer caches every token (exact up to the chunk)."""
    s, row = shape("Llama-4-Maverick-17B-128E")
    read = (row["sliding_window"], row["sliding_layers"], row["dense_layers"], row["shared_experts"])
    assert read == (8192, 36, 24, 1)
    assert s.kv_values_per_token == 48 * 2 * 8 * 128


@pytest.mark.parametrize("name", ["DeepSeek-V3", "Qwen3-30B-A3B", "Llama-3.1-8B", "gpt-oss-120b", "gpt-oss-20b",
                                  "Llama-4-Scout-17B-16E", "Llama-4-Maverick-17B-128E", "MiniMax-M2.5"])
def test_a_shipped_model_is_what_its_config_says(name):
    row = model_config_from_hf(config(name), "x")
    shipped = load_table("models").loc[name]
    assert {k: row[k] for k in SHAPE_KEYS} == {k: shipped[k] for k in SHAPE_KEYS}
    assert int(row["tied_embeddings"]) == int(shipped["tied_embeddings"])
    # MiniMax-M2 normalises queries and keys over all heads (qk_norm_type per_layer); Qwen3's norm is per head
    assert int(row["qk_norm_all_reduce"]) == int(shipped["qk_norm_all_reduce"]) == int(name == "MiniMax-M2.5")


def test_a_user_model_runs_as_the_shipped_row_of_the_same_shape_bit_for_bit():
    base = ["server.step_model=roofline", "server.gpu=H100-80G", "server.quant=mxfp4-w4a16",
            "workload.num_requests=300"]
    shipped = engine.simulate(engine.load_scenario(REPO / "data/scenarios/example.toml",
                                                   overrides=[*base, "server.model=gpt-oss-20b"]))
    yours = engine.simulate(engine.load_scenario(REPO / "data/scenarios/example.toml", overrides=[
        *base, *user_model_overrides(config("gpt-oss-20b"), "gpt-oss-20b")]))
    assert yours.scenario.server.model == "gpt-oss-20b (your config)"
    assert {**yours.summary, "run": None} == {**shipped.summary, "run": None}  # "run" holds the wall time


def test_a_config_kept_while_a_shipped_model_is_served_changes_nothing():
    data = apply_overrides(EXAMPLE, user_model_overrides(config("gpt-oss-20b"), "x"))
    unused = engine.load_scenario(apply_overrides(data, {"server.model": "Llama-3-8B"})).server
    assert peak_profile(unused, 1) == peak_profile(Server(step_model="roofline", model="Llama-3-8B"), 1)


def test_the_link_carries_the_users_model():
    data = apply_overrides(EXAMPLE, user_model_overrides(config("Llama-4-Scout-17B-16E"), "x"))
    assert engine.load_scenario(decode(encode(data))).server.model_config.experts == 16


@pytest.mark.parametrize("content, start", [
    (b'{"num_hidden_layers": 2', "config.json is not JSON (line 1"),
    (b"[1, 2]", "config.json holds a JSON list, not an object"),
    (b"\xff\xfe", "config.json is not UTF-8 text"),
    (b'{"num_hidden_layers": 2, "hidden_size": 64}', "config.json has no num_attention_heads"),
    (b'{"num_hidden_layers": -2, "hidden_size": 64}', "config.json num_hidden_layers = -2 must be a whole number"),
    (b'{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3, '
     b'"intermediate_size": 8, "vocab_size": 10}', "server.model_config.kv_heads = 3 must divide heads = 4"),
    (b'{"num_hidden_layers": 4000, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 8, '
     b'"vocab_size": 10}', "server.model_config.layers = 4000 must be <= 1,024 layers"),
    (b'{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 8, '
     b'"vocab_size": 10, "mamba_d_state": 16}', "config.json describes state-space (Mamba) layers"),
    (b" " * (CONFIG_MAX_BYTES + 1), "config.json is over 1 MiB"),
])
def test_a_bad_config_is_one_line_naming_the_key(content, start):
    with pytest.raises(engine.ScenarioError) as caught:
        model_config_from_hf(parse_config(content), "mine")
    assert str(caught.value).startswith(start) and "\n" not in str(caught.value)


def test_the_command_line_serves_a_config_and_shows_its_size(tmp_path):
    done = subprocess.run([sys.executable, "-m", "engine", "hardware", "data/scenarios/example.toml",
                           "--model-config", str(CONFIGS / "gpt-oss-120b.json"), "--set", "server.gpu=H200",
                           "--set", "server.quant=fp8"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 x H200, gpt-oss-120b (your config) (fp8 weights" in done.stdout
    assert "model: 116.8 billion parameters, 5.7 billion active per token (embedding row included)" in done.stdout
    assert "KV cache 36.0 KiB per token on all cards" in done.stdout
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"num_hidden_layers": 2}))
    done = subprocess.run([sys.executable, "-m", "engine", "run", "data/scenarios/example.toml", "--model-config",
                           str(bad)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and done.stderr.strip() == "error: config.json has no hidden_size; it is required " \
                                                           "(give the model's own config.json)"


DENSE = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 32000}


@pytest.mark.parametrize("keys, window", [
    ({"sliding_window": 4096}, (4096, 32)),                              # Mistral-7B-v0.1: every layer
    ({"sliding_window": 4096, "use_sliding_window": False}, (0, 0)),     # Qwen: a window named but off
    ({"sliding_window": None}, (0, 0)),                                  # Mistral-7B-v0.3
    ({"sliding_window": 512, "layer_types": ["sliding_attention"] * 20 + ["full_attention"] * 12}, (512, 20)),
])
def test_windowed_layers_are_read_from_the_keys_that_name_them(keys, window):
    row = model_config_from_hf({**DENSE, **keys}, "mine")
    assert (row["sliding_window"], row["sliding_layers"]) == window


def test_a_config_json_without_its_repository_name_is_not_called_config():
    """A file saved as config.json names nothing: the model type names it, and the user's own name wins."""
    bare = {k: v for k, v in config("gpt-oss-20b").items() if k != "_name_or_path"}
    assert model_name(bare, "config") == "gpt_oss model"
    assert model_name(bare, "my-oss") == "my-oss"
    named = apply_overrides(EXAMPLE, user_model_overrides(bare, "config", name="acme-chat-20b"))
    assert engine.load_scenario(named).server.model == "acme-chat-20b"
    shipped_name = apply_overrides(EXAMPLE, user_model_overrides(bare, "config", name="gpt-oss-20b"))
    assert engine.load_scenario(shipped_name).server.model == "gpt-oss-20b (your config)"


@pytest.mark.parametrize("field, value, said", [
    ("hidden_size", "NaN", "holds NaN, which is not a number a config.json gives; give finite numbers"),
    ("vocab_size", "Infinity", "holds Infinity, which is not a number a config.json gives; give finite numbers"),
    ("num_hidden_layers", "1e308", "config.json num_hidden_layers = 1e+308 must be a whole number from 0 to "
                                   "2,147,483,647"),
])
def test_a_config_json_with_a_number_out_of_range_is_one_short_line_and_exit_2(field, value, said, tmp_path, capsys):
    text = json.dumps(config("Llama-3.1-8B")).replace(f'"{field}": ', f'"{field}": {value}, "was_{field}": ', 1)
    assert f'"{field}": {value},' in text
    path = tmp_path / "config.json"
    path.write_text(text)
    status = main(["run", str(REPO / "data/scenarios/example.toml"), "--model-config", str(path),
                   "--set", "workload.num_requests=20"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and said in err and len(err) < 200 and "\n" not in err and "internal error" not in err


@pytest.mark.parametrize("name", ["Llama🦙-8B", "通义-千问", 'say "hi" \\ back', "tab\there", "del\x7fname"])
def test_a_model_named_beyond_ascii_is_served_under_its_own_name(name):
    """A name with an emoji read back as '"Llama\\ud83e\\udd99-8B"' (JSON's escapes are not TOML) and was refused
    as no model of the table; every name reads back as written."""
    assert engine.scenario.config._parse_value(toml_string(name)) == name
    served = apply_overrides(EXAMPLE, user_model_overrides(config("Llama-3.1-8B"), "config", name=name))
    assert engine.load_scenario(served).server.model == name.strip()


def test_the_command_line_serves_a_config_whose_repository_name_has_an_emoji(tmp_path):
    emoji = tmp_path / "config.json"
    emoji.write_text(json.dumps({**config("Llama-3.1-8B"), "_name_or_path": "acme/Llama🦙-8B"}, ensure_ascii=False))
    done = subprocess.run([sys.executable, "-m", "engine", "hardware", "data/scenarios/example.toml",
                           "--model-config", str(emoji)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Llama🦙-8B" in done.stdout


# --------------------------------------------------------------------------- hostile config.json files


def with_value(key: str, value_json: str) -> bytes:
    """The Llama-3.1-8B config.json with ``key`` set to ``value_json`` (JSON text, written as it is)."""
    text = json.dumps({**config("Llama-3.1-8B"), key: "placeholder"})
    return text.replace(f'"{key}": "placeholder"', f'"{key}": {value_json}', 1).encode()


@pytest.mark.parametrize("value_json, shown", [
    ("9" * 400, "a number of more than 15 digits"),   # math.isfinite(int) overflowed: an internal error
    ("-" + "9" * 400, "a number of more than 15 digits"),
    (str(2**31), str(2**31)),
])
def test_an_integer_too_large_for_a_float_is_one_line_naming_the_key(value_json, shown):
    with pytest.raises(engine.ScenarioError) as caught:
        model_config_from_hf(parse_config(with_value("hidden_size", value_json)), "mine")
    assert str(caught.value) == f"config.json hidden_size = {shown} must be a whole number from 0 to 2,147,483,647"


def test_an_integer_longer_than_python_reads_is_one_line_saying_so():
    with pytest.raises(engine.ScenarioError, match="^config.json holds a number of more than 4,300 digits, which is "
                                                   "not a size a config.json gives"):
        parse_config(with_value("hidden_size", "9" * 5000))


def test_layer_numbers_that_are_not_numbers_are_one_line():
    moe = {**config("Qwen3-30B-A3B"), "mlp_only_layers": [{}]}  # set() of dicts raised TypeError
    with pytest.raises(engine.ScenarioError, match="^config.json mlp_only_layers = \\[\\{\\}\\] must be a list of "
                                                   "layer numbers$"):
        model_config_from_hf(moe, "mine")


@pytest.mark.parametrize("key", ["_name_or_path", "model_type"])
def test_a_lone_surrogate_in_a_config_is_one_line_naming_the_key(key):
    """JSON's escape "\\udc80" is a lone surrogate, which no page can show (the Hardware & Cost page failed showing
    the model's name)."""
    with pytest.raises(engine.ScenarioError) as caught:
        parse_config(with_value(key, '"acme/\\udc80"'))
    assert str(caught.value) == (f"config.json: {key} is not Unicode text (character 6 is a lone surrogate); remove "
                                 f"it (give the model's config.json)")


@pytest.mark.parametrize("value_json, said", [
    ("9" * 400, "error: config.json hidden_size = a number of more than 15 digits must be a whole number from 0 to "
                "2,147,483,647"),
    ('"\\udc80"', "_name_or_path is not Unicode text (character 1 is a lone surrogate)"),
])
def test_the_command_line_says_one_line_for_a_hostile_config(value_json, said, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_bytes(with_value("hidden_size" if value_json[0] == "9" else "_name_or_path", value_json))
    status = main(["run", str(REPO / "data/scenarios/example.toml"), "--model-config", str(path),
                   "--set", "workload.num_requests=20"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and said in err and "\n" not in err and "internal error" not in err


def test_the_command_line_never_waits_on_a_fifo_for_a_config(tmp_path):
    """A FIFO given as --model-config was opened with open(), which waits for a writer forever."""
    import os

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "engine", "run", "data/scenarios/example.toml", "--model-config",
                           str(fifo)], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: --model-config {str(fifo)!r} is a FIFO (named pipe), not a regular file; " \
                                  f"give a file"


def test_the_command_line_refuses_a_device_or_a_large_file_as_a_config(tmp_path, capsys):
    big = tmp_path / "config.json"
    big.write_bytes(b" " * (CONFIG_MAX_BYTES + 1))
    for path, said in (("/dev/zero", "'/dev/zero' is a character device, not a regular file"),
                       (str(big), f"has {CONFIG_MAX_BYTES + 1:,} bytes, more than the limit of {CONFIG_MAX_BYTES:,} "
                                  f"bytes; a model's config.json is a few KiB")):
        assert main(["run", str(REPO / "data/scenarios/example.toml"), "--model-config", path]) == 2
        assert said in capsys.readouterr().err
