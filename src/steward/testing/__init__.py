"""Fakes that ship with Steward for tests.

A loopback server speaking the OpenAI and Anthropic wire formats.
"""
