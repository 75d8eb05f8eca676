"""ThinkFilter: <think> blocks in streamed text become thinking, wherever the deltas split."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from steward.models._think import ThinkFilter
from steward.models.base import TextDelta, ThinkingDelta


def run(*deltas: str) -> list[TextDelta | ThinkingDelta]:
    think = ThinkFilter()
    out: list[TextDelta | ThinkingDelta] = []
    for delta in deltas:
        out.extend(think.feed(delta))
    out.extend(think.flush())
    return out


def split(items: Iterable[TextDelta | ThinkingDelta]) -> tuple[str, str]:
    """(text, thinking), each concatenated."""
    items = list(items)
    text = "".join(i.text for i in items if isinstance(i, TextDelta))
    thinking = "".join(i.text for i in items if isinstance(i, ThinkingDelta))
    return text, thinking


def test_text_without_tags_passes_through() -> None:
    assert run("Hello, ", "world.") == [TextDelta("Hello, "), TextDelta("world.")]


def test_think_block_becomes_thinking() -> None:
    assert run("<think>plan it</think>Done.") == [ThinkingDelta("plan it"), TextDelta("Done.")]


def test_thinking_tag_is_recognised_too() -> None:
    assert run("<thinking>plan it</thinking>Done.") == [ThinkingDelta("plan it"), TextDelta("Done.")]


def test_tags_split_across_deltas_are_recognised() -> None:
    assert split(run("<thi", "nk>abc</th", "ink>rest")) == ("rest", "abc")


def test_text_on_both_sides_of_a_block_stays_text() -> None:
    assert split(run("Before <think>inner</think> after")) == ("Before  after", "inner")


def test_thinking_is_emitted_while_it_streams() -> None:
    think = ThinkFilter()
    assert think.feed("<think>first ") == [ThinkingDelta("first ")]
    assert think.feed("second") == [ThinkingDelta("second")]


def test_possible_tag_start_is_held_back_until_the_next_delta() -> None:
    think = ThinkFilter()
    assert think.feed("Answer <th") == [TextDelta("Answer ")]
    assert think.feed("e end") == [TextDelta("<the end")]


def test_lone_closing_tag_before_any_text_turns_what_came_before_into_thinking() -> None:
    assert run("reasoning without an opening tag</think>The answer.") == [
        ThinkingDelta("reasoning without an opening tag"),
        TextDelta("The answer."),
    ]


def test_lone_closing_tag_after_text_was_emitted_is_dropped() -> None:
    assert split(run("Visible text. ", "more</think> end")) == ("Visible text. more end", "")


def test_whitespace_before_the_first_text_is_dropped() -> None:
    assert run("<think>x</think>", "\n\n", "Answer") == [ThinkingDelta("x"), TextDelta("Answer")]


def test_whitespace_inside_the_text_is_kept() -> None:
    assert split(run("a", "\n\n", "b")) == ("a\n\nb", "")


def test_unterminated_think_block_is_flushed_as_thinking() -> None:
    assert run("<think>cut off mid-th", "ought") == [ThinkingDelta("cut off mid-th"), ThinkingDelta("ought")]


def test_partial_tag_at_the_end_is_flushed_as_text() -> None:
    assert split(run("x < y and <thin")) == ("x < y and <thin", "")


def test_partial_closing_tag_inside_thinking_is_flushed_as_thinking() -> None:
    assert split(run("<think>abc</thi")) == ("", "abc</thi")


def test_adjacent_pieces_of_one_kind_come_out_merged() -> None:
    assert run("<think>a</think><think>b</think>c") == [ThinkingDelta("ab"), TextDelta("c")]


def test_flush_resets_for_the_next_reply() -> None:
    think = ThinkFilter()
    think.feed("<think>unfinished")
    think.flush()
    assert think.feed("plain") == [TextDelta("plain")]


REPLY = "<think>step 1 < step 2</think>\nThe <b>answer</b> is </thinking> 42."


@pytest.mark.parametrize("cut", range(1, len(REPLY)))
def test_any_split_into_two_deltas_gives_the_same_result(cut: int) -> None:
    assert split(run(REPLY[:cut], REPLY[cut:])) == split(run(REPLY))


def test_one_character_per_delta_gives_the_same_result() -> None:
    assert split(run(*REPLY)) == split(run(REPLY)) == ("The <b>answer</b> is  42.", "step 1 < step 2")
