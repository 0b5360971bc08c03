"""plan's one-line refusals where the terms of its input, not its search, leave nothing to run."""

from __future__ import annotations

from cli_checks import refused


def test_no_method_applies_says_why_not_the_cap(capsys):
    # DualPipe needs m >= 2p: with no cap, "raise memory_cap" would send the user the wrong way
    err = refused(capsys, "plan", "blocks16-p4", "--placements", "dualpipe", "--devices", "10",
                  "--mem", "none", "--time-limit", "1", "--quiet")
    assert "microbatches >= 2 * devices = 20, got 16" in err
    assert "memory_cap" not in err


def test_a_placement_listed_twice_is_refused(capsys):
    err = refused(capsys, "plan", "blocks16-p4", "--placements", "v,contiguous,v",
                  "--time-limit", "1", "--quiet")
    assert err == "zbopt: error: --placements 'v,contiguous,v': v listed twice: list each once"


def test_a_value_that_looks_like_an_option_says_how_to_give_it(capsys):
    err = refused(capsys, "plan", "blocks16-p4", "--mem", "-1,2,3,4", "--quiet")
    assert "argument --mem: expected one argument (a value that starts with '-' goes after '='" \
        in err
    err = refused(capsys, "plan", "blocks16-p4", "--mem=-1,2,3,4", "--quiet")  # then it is read
    assert "--mem" in err and "expected one argument" not in err
