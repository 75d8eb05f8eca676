"""Split ``<think>…</think>`` reasoning out of streamed text.

Many open models (DeepSeek-R1, Qwen3, QwQ, …) served through OpenAI-compatible servers put
their reasoning inline in the reply text. ``ThinkFilter`` turns such a stream of text
deltas into ``TextDelta`` and ``ThinkingDelta`` items, holding back only what could be the
start of a tag split across deltas.

Rules, kept deliberately simple:

* ``<think>`` and ``<thinking>`` open a thinking block; ``</think>`` and ``</thinking>``
  close it. Tags are matched exactly (lower case), wherever they appear.
* A closing tag with no opening tag ("lone" closing tag): some reasoning models start
  inside a thinking block because the opening tag was part of the prompt template. If it
  is the first tag and no text has been emitted yet, everything before it is thinking.
  Text already emitted cannot be taken back, so in streaming this only works when the
  reasoning and the tag arrive before any text is let out (whole replies, large chunks);
  any other lone closing tag is dropped.
* Whitespace before the first visible text is dropped (models put blank lines after
  ``</think>``), so the reply text starts with its first real character.
* ``flush`` releases what was held back (an unterminated thinking block stays thinking; a
  partial tag at the very end was not a tag and becomes text) and readies the filter for
  the next reply.
"""

from __future__ import annotations

from .base import TextDelta, ThinkingDelta

_OPEN_TAGS = ("<think>", "<thinking>")
_CLOSE_TAGS = ("</think>", "</thinking>")
_ALL_TAGS = _OPEN_TAGS + _CLOSE_TAGS

Delta = TextDelta | ThinkingDelta


class ThinkFilter:
    """Feed text deltas in, get text and thinking deltas out; call ``flush`` at the end."""

    def __init__(self) -> None:
        self._buffer = ""
        self._inside = False
        # Until text goes out or a tag is seen, a lone closing tag means "all so far was reasoning".
        self._fresh = True
        self._text_emitted = False

    def feed(self, text: str) -> list[Delta]:
        """Consume one text delta; return what can be emitted now (adjacent items merged)."""
        self._buffer += text
        out: list[Delta] = []
        while self._buffer:
            tags = _CLOSE_TAGS if self._inside else _ALL_TAGS
            position, tag = _find_first(self._buffer, tags)
            if tag is None:
                held = _partial_tag_length(self._buffer, tags)
                ready = self._buffer[: len(self._buffer) - held]
                self._buffer = self._buffer[len(ready) :]
                self._emit(out, ready, thinking=self._inside)
                break
            before = self._buffer[:position]
            self._buffer = self._buffer[position + len(tag) :]
            self._on_tag(out, before, tag)
        return out

    def flush(self) -> list[Delta]:
        """Release held-back text at the end of the stream."""
        out: list[Delta] = []
        self._emit(out, self._buffer, thinking=self._inside)
        self._buffer = ""
        self._inside = False
        self._fresh = True
        self._text_emitted = False
        return out

    def _on_tag(self, out: list[Delta], before: str, tag: str) -> None:
        if self._inside:  # only closing tags are searched for inside a block
            self._emit(out, before, thinking=True)
            self._inside = False
        elif tag in _OPEN_TAGS:
            self._emit(out, before, thinking=False)
            self._inside = True
            self._fresh = False
        else:
            self._emit(out, before, thinking=self._fresh)
            self._fresh = False

    def _emit(self, out: list[Delta], text: str, *, thinking: bool) -> None:
        if not thinking and not self._text_emitted:
            text = text.lstrip()
        if not text:
            return
        if thinking:
            if out and isinstance(out[-1], ThinkingDelta):
                out[-1] = ThinkingDelta(out[-1].text + text)
            else:
                out.append(ThinkingDelta(text))
            return
        self._fresh = False
        self._text_emitted = True
        if out and isinstance(out[-1], TextDelta):
            out[-1] = TextDelta(out[-1].text + text)
        else:
            out.append(TextDelta(text))


def _find_first(text: str, tags: tuple[str, ...]) -> tuple[int, str | None]:
    """Position and value of the earliest tag in ``text`` (``(-1, None)`` if none)."""
    best_position, best_tag = -1, None
    for tag in tags:
        position = text.find(tag)
        if position != -1 and (best_tag is None or position < best_position):
            best_position, best_tag = position, tag
    return best_position, best_tag


def _partial_tag_length(text: str, tags: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``tags``."""
    longest = 0
    for tag in tags:
        for size in range(min(len(tag) - 1, len(text)), longest, -1):
            if text.endswith(tag[:size]):
                longest = size
                break
    return longest
