"""Steward: a self-hosted runtime for autonomous, tool-using LLM agents."""
