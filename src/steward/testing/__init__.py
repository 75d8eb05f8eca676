"""Fakes that ship with Steward for tests.

A loopback server speaking the OpenAI and Anthropic wire formats (``fake_llm``), deterministic
embeddings (``fake_embed``), and ``fake_forge.FakeForge``: a loopback server speaking GitHub's and
Gitea's pull-request APIs.
"""
