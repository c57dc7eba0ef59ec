"""The Java options a driver JVM launched here gets besides the class archive's
(``session/jvm.py``): the JIT's, and how they join the user's own."""

from __future__ import annotations

import os

import pytest

from spark_jobs.session import jvm as dj
from spark_jobs.spec.spec_error import SpecError

QUICK = "-XX:TieredStopAtLevel=1"


@pytest.mark.parametrize("setting", [{dj.JIT_SETTING: "quick"}, {dj.JIT_SETTING: " QUICK "}])
def test_when_asked_the_jvm_runs_c1_alone(setting):
    assert QUICK in dj.jit_options(setting).split()


@pytest.mark.parametrize(
    "setting", [{}, {dj.JIT_SETTING: ""}, {dj.JIT_SETTING: "full"}, {dj.JIT_SETTING: " Full "}]
)
def test_by_default_and_with_full_the_jvm_keeps_its_own_tiers(setting):
    assert dj.jit_options(setting) == ""


@pytest.mark.parametrize(
    "own",
    [
        {"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=4"},
        {"JDK_JAVA_OPTIONS": "-XX:-TieredCompilation"},
        {"JAVA_TOOL_OPTIONS": "-Xmx2g -XX:TieredStopAtLevel=3"},
        {"PYSPARK_SUBMIT_ARGS": "--driver-java-options -XX:TieredStopAtLevel=2 pyspark-shell"},
    ],
)
def test_a_users_own_jit_options_are_left_alone(own):
    assert dj.jit_options(own) == ""


def test_another_value_is_an_error_naming_the_setting_and_its_choices():
    with pytest.raises(SpecError) as raised:
        dj.jit_options({dj.JIT_SETTING: "fast"})
    message = str(raised.value)
    assert dj.JIT_SETTING in message and "'fast'" in message
    assert "quick" in message and "full" in message


def test_launching_adds_the_options_after_the_users_own_and_restores_them(monkeypatch):
    monkeypatch.setenv(dj.SUBMIT_OPTIONS, "-Dmine=1")
    with dj.launching(f" {QUICK} "):
        assert os.environ[dj.SUBMIT_OPTIONS] == f"-Dmine=1 {QUICK}"
    assert os.environ[dj.SUBMIT_OPTIONS] == "-Dmine=1"
    monkeypatch.delenv(dj.SUBMIT_OPTIONS)
    with dj.launching(QUICK):
        assert os.environ[dj.SUBMIT_OPTIONS] == QUICK
    assert dj.SUBMIT_OPTIONS not in os.environ


def test_launching_nothing_leaves_the_environment_as_it_was(monkeypatch):
    monkeypatch.delenv(dj.SUBMIT_OPTIONS, raising=False)
    with dj.launching(" "):
        assert dj.SUBMIT_OPTIONS not in os.environ
