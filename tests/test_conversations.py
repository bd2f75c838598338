"""Synthetic conversations (a class's ``conversation_turns``): follow-ups whose prompt is the previous turn's prompt
and output plus new tokens, sharing the previous prompt's blocks. Prompts and block ids by hand, the deal of
arrivals to the conversations in flight, and the prefix cache's hits on them computed independently."""

import dataclasses

import numpy as np
import pytest

import engine
from engine.scenario.caps import DEFAULT_CAPS
from engine.scenario.origin import Origin
from engine.sim.simulate import cached_prompt_tokens
from engine.sim.workload import FRESH_ID_BASE, build_requests


def chat(turns: int, gap_s: float, rate_per_s: float = 1.0, n: int = 8, shared: int = 0, caching: bool = True,
         **cls) -> engine.Scenario:
    return engine.load_scenario({
        "workload": {"num_requests": n, "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
                     "classes": [{"name": "chat", "share": 1.0, "conversation_turns": turns, "turn_gap_s": gap_s,
                                  "shared_prefix_tokens": shared, "prompt_tokens": {"dist": "constant", "value": 32},
                                  "output_tokens": {"dist": "constant", "value": 16}, **cls}]},
        "server": {"step_model": "fixed", "step_time_ms": 10.0, "block_size_tokens": 16, "prefix_caching": caching}})


def blocks_of(requests, r: int) -> list[int]:
    return list(requests.prefix_ids[requests.prefix_offsets[r]:requests.prefix_offsets[r + 1]])


def test_a_follow_up_carries_the_previous_turn_and_shares_its_prompts_blocks():
    """One conversation in flight (turn gap 1 s x 1 req/s), three turns each. r0: 32 new tokens (blocks f0 f1).
    r1: 32 + 16 output + 32 new = 80 tokens, blocks f0 f1 (r0's prompt) then f2 f3 f4 (r0's output and its own
    tokens: new content). r2: 80 + 16 + 32 = 128, r1's five blocks then three of its own. r3 starts a new
    conversation: 32 tokens, fresh blocks."""
    requests = build_requests(chat(3, 1.0, n=4))
    assert list(requests.prompt_tokens) == [32, 80, 128, 32]
    f = FRESH_ID_BASE
    assert blocks_of(requests, 0) == [f, f + 1]
    assert blocks_of(requests, 1) == [f, f + 1, f + 2, f + 3, f + 4]
    assert blocks_of(requests, 2) == [f, f + 1, f + 2, f + 3, f + 4, f + 5, f + 6, f + 7]
    assert blocks_of(requests, 3) == [f + 8, f + 9]
    # a cache holding every earlier prompt finds the previous prompt's whole blocks
    assert list(cached_prompt_tokens(requests, 16)) == [0, 32, 80, 0]


def test_turns_interleave_over_the_conversations_in_flight():
    """Turn gap 2 s at 1 req/s: two conversations at once, arrivals dealt in turn: r0 and r1 open them, r2 follows
    r0 and r3 follows r1 (two turns each), r4 and r5 open the next two."""
    requests = build_requests(chat(2, 2.0, n=6))
    assert list(requests.prompt_tokens) == [32, 32, 80, 80, 32, 32]
    assert blocks_of(requests, 2)[:2] == blocks_of(requests, 0)
    assert blocks_of(requests, 3)[:2] == blocks_of(requests, 1)
    assert not set(blocks_of(requests, 4)) & set(blocks_of(requests, 0) + blocks_of(requests, 1))


def test_a_first_turn_starts_with_the_classs_shared_prompt():
    """A 16-token system prompt: every first turn's first block is the class's shared one (0 x 2^32 + 0)."""
    requests = build_requests(chat(2, 1.0, n=4, shared=16))
    assert blocks_of(requests, 0)[0] == blocks_of(requests, 2)[0] == 0
    assert blocks_of(requests, 1)[:2] == blocks_of(requests, 0)


def test_prompts_never_grow_past_the_limit():
    """Fifty turns of 32 + 16 tokens would reach 2,384 tokens: the limit on tokens per request (500 here) holds."""
    data = engine.scenario.config.scenario_to_dict(chat(50, 1.0, n=50))
    origin = Origin(caps=dataclasses.replace(DEFAULT_CAPS, tokens_per_request=500))
    requests = build_requests(engine.load_scenario(data, origin=origin))
    assert requests.prompt_tokens.max() == 500
    assert list(requests.prompt_tokens[:3]) == [32, 80, 128]


def test_the_cache_finds_every_previous_prompt_when_turns_come_after_their_replies():
    """Turns 30 s apart at a low rate: each follow-up arrives long after its previous turn left, so an unlimited
    cache holds that turn's prompt: the simulated hit rate is the sum of the previous prompts' usable blocks over all
    prompt tokens, counted here from the drawn requests alone."""
    scenario = chat(4, 30.0, rate_per_s=0.1, n=400, caching=True,
                    prompt_tokens={"dist": "uniform", "low": 20, "high": 200})
    requests = build_requests(scenario)
    starts, ids = requests.prefix_offsets, requests.prefix_ids
    expected = 0
    for r in range(len(requests)):
        mine = ids[starts[r]:starts[r + 1]]
        earlier = set(ids[:starts[r]])
        leading = next((j for j, u in enumerate(mine) if u not in earlier), len(mine))
        expected += min(leading, (requests.prompt_tokens[r] - 1) // 16) * 16
    summary = engine.simulate(scenario).summary["system"]
    assert summary["prefill_saved_tokens"] == expected
    assert summary["prefix_hit_frac"] == pytest.approx(expected / requests.prompt_tokens.sum())
    assert 0.4 < summary["prefix_hit_frac"] < 0.8


def test_conversations_with_a_trace_are_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\n")
    with pytest.raises(engine.ScenarioError, match=r"workload\.classes\[0\]\.conversation_turns builds conversations "
                                                   r"from synthetic arrivals"):
        engine.load_scenario({"workload": {"classes": [{"name": "a", "share": 1.0, "conversation_turns": 3}],
                                           "trace": {"path": str(path)}}})


def test_without_prefix_caching_the_prompts_are_the_same_and_no_block_is_kept():
    """Block ids matter to a prefix cache only: without one none are built (a million-token shared prefix costs no
    memory then), and the conversations' prompts are the same."""
    for turns in (1, 3):
        cached, plain = build_requests(chat(turns, 1.0, n=40, shared=16)), build_requests(
            chat(turns, 1.0, n=40, shared=16, caching=False))
        assert np.array_equal(cached.prompt_tokens, plain.prompt_tokens) and cached.prefix_ids is not None
        assert plain.prefix_ids is None and plain.prefix_offsets is None


def test_without_conversations_the_workload_is_unchanged():
    """One turn per conversation draws exactly the requests of a class without the key."""
    plain = build_requests(chat(1, 1.0, n=50, shared=16))
    data = engine.scenario.config.scenario_to_dict(chat(1, 1.0, n=50, shared=16))
    for cls in data["workload"]["classes"]:
        del cls["conversation_turns"], cls["turn_gap_s"]
    again = build_requests(engine.load_scenario(data))
    assert np.array_equal(plain.prompt_tokens, again.prompt_tokens)
    assert np.array_equal(plain.prefix_ids, again.prefix_ids)
