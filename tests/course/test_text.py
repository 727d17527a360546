"""gaviz.course.text: reports wrapped between words for a notebook's output area."""


def test_reports_wrap_between_words_with_bullets_hanging():
    from gaviz.course import wrapped

    line = "- dropped_tail: " + " ".join(["samples"] * 30)
    text = wrapped("headline\n" + line, width=40)
    lines = text.splitlines()
    assert lines[0] == "headline" and all(len(row) <= 40 for row in lines)
    assert lines[1].startswith("- dropped_tail: ")
    assert all(row.startswith("  samples") for row in lines[2:])
    assert text.replace("\n  ", " ").replace("\n", " ") == "headline " + line  # no word cut


def test_a_too_narrow_width_is_refused():
    import pytest

    from gaviz.course import wrapped

    with pytest.raises(ValueError, match="`width` must be an integer >= 20. Received: width=5"):
        wrapped("text", width=5)
