"""What the model is told about its environment: the names probe and the parsing of a kernel's answer,
which is a claim of the kernel's (it can print anything)."""

from __future__ import annotations

import math

import pandas as pd

from kernel_agent.agent.environment import (
    MAX_NAMES,
    Environment,
    host_packages,
    names_expression,
    parse_list,
    probe_expression,
)


def test_the_names_probe_lists_the_analysis_names_with_types_and_shapes() -> None:
    namespace = {
        "df": pd.DataFrame({"a": [1, 2], "b": [3, 4]}),
        "ratios": [0.5, 0.25],
        "_hidden": 1,
        "math": math,
        "In": [],
        "data": object(),
        "Frame": pd.DataFrame,
        "mean": 2.5,
        "__builtins__": __builtins__,
    }
    listed = eval(names_expression(), namespace)  # the kernel evaluates it as a user expression, in its globals
    assert listed == ["df: DataFrame 2x2", "ratios: list len 2", "mean: float"]  # no modules, classes, setup names


def test_a_kernels_answer_is_parsed_without_trusting_it() -> None:
    assert parse_list("['df: DataFrame 2x2', 'x: int']") == ("df: DataFrame 2x2", "x: int")
    assert parse_list("__import__('os').system('true')") == ()  # never evaluated
    assert parse_list("{'not': 'a list'}") == () and parse_list(None) == () and parse_list("[") == ()
    assert parse_list("['ok', 3, None]") == ("ok",)
    assert parse_list(repr(["x" * 10_000])) == ("x" * 120,)  # each entry bounded
    assert parse_list(repr(["x"] * 100_000)) == ()  # an answer this long is not parsed at all
    assert parse_list("[" * 200 + "]" * 200) == ()


def test_the_names_line_is_bounded() -> None:
    many = Environment(names=tuple(f"v{i}: int" for i in range(MAX_NAMES + 5)))
    line = many.names_line()
    assert line.startswith("Defined in the kernel so far (reuse them, do not reload): `v0: int`")
    assert line.endswith("and 5 more.") and f"v{MAX_NAMES}:" not in line
    assert Environment().names_line() == ""


def test_the_packages_asked_here_are_what_the_kernels_probe_says_in_the_same_interpreter() -> None:
    in_a_kernel = eval(probe_expression())  # what a kernel running this interpreter answers, nothing imported
    assert list(host_packages()) == in_a_kernel
    assert any(entry.startswith("pandas ") for entry in in_a_kernel)
