"""dsh.core.idprefix: how an id given by its start is read (the commands using it are
driven for real in test_sessions_cli.py and tests/chat)."""

from __future__ import annotations

from dsh.core.idprefix import MIN_PREFIX, ambiguous, named

IDS = ["abcd1234", "abcd12", "abce0000", "ffff"]


def test_a_whole_id_names_itself_even_when_it_begins_another() -> None:
    assert named("abcd12", IDS) == ["abcd12"]
    assert named("ffff", IDS) == ["ffff"]


def test_a_start_names_every_id_it_begins_and_a_short_one_none() -> None:
    assert named("abcd1", IDS) == ["abcd1234", "abcd12"]
    assert named("abce", IDS) == ["abce0000"]
    assert named("abc", IDS) == [] and len("abc") < MIN_PREFIX
    assert named("zzzz", IDS) == [] and named("", IDS) == []


def test_the_refusal_shows_three_and_says_how_many() -> None:
    many = [f"abcd{i}" for i in range(5)]
    assert ambiguous("abcd", many) == ("'abcd' begins 5 session ids (abcd0, abcd1, abcd2, "
                                       "...): give more of it")
    assert ambiguous("ab\x1bcd", many[:2]) == ("'ab\\x1bcd' begins 2 session ids "
                                               "(abcd0, abcd1): give more of it")
