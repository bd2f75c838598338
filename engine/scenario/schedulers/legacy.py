"""Engines of 2023-24 (vLLM before V1, TGI, LMDeploy TurboMind, DeepSpeed-FastGen): read as vLLM before V1 did
(vllm/core/scheduler.py), with no knob that holds a new request back."""

from __future__ import annotations


NAME, RELEASE = "engines of 2023-24", ""
