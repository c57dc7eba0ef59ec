"""load_user_function / open_user_function: good specs load, bad ones say why."""

import sys
import textwrap

import pytest

from spark_jobs.enrichers import UserFunctionError, load_user_function, open_user_function

MODULE = textwrap.dedent(
    """
    from contextlib import asynccontextmanager

    async def enrich(record):
        return {"seen": record}

    def sync_enrich(record):
        return record

    class Caller:
        async def __call__(self, record):
            return record * 2

    caller = Caller()
    not_callable = 42

    class Namespace:
        @staticmethod
        async def nested(record):
            return -record

    @asynccontextmanager
    async def factory():
        async def fn(record):
            return ("from factory", record)
        yield fn

    @asynccontextmanager
    async def bad_factory():
        yield 5

    def plain_factory():
        return 3
    """
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_user_functions.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_user_functions"
    sys.modules.pop("my_user_functions", None)


async def test_loads_async_functions_and_async_callables(user_module):
    assert await load_user_function(f"{user_module}:enrich")(1) == {"seen": 1}
    assert await load_user_function(f"{user_module}:caller")(2) == 4
    assert await load_user_function(f"{user_module}:Namespace.nested")(3) == -3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must look like"),
        ("a:b:c", "must look like"),
        (":enrich", "must look like"),
        ("surely_not_a_module_xyz:f", "cannot import module 'surely_not_a_module_xyz'"),
        ("{m}:absent", "has no attribute 'absent'"),
        ("{m}:sync_enrich", "not an async function"),
        ("{m}:not_callable", "is a int"),
        ("{m}:Caller", "not an async function"),
    ],
)
def test_bad_specs(user_module, spec, message):
    with pytest.raises(UserFunctionError, match=message):
        load_user_function(spec.format(m=user_module))


async def test_open_user_function_handles_functions_and_factories(user_module):
    async with open_user_function(f"{user_module}:enrich") as fn:
        assert await fn(1) == {"seen": 1}
    async with open_user_function(f"{user_module}:factory") as fn:
        assert await fn(2) == ("from factory", 2)
    with pytest.raises(UserFunctionError, match="yielded a int"):
        async with open_user_function(f"{user_module}:bad_factory"):
            pass
    with pytest.raises(UserFunctionError, match="returned a int"):
        async with open_user_function(f"{user_module}:plain_factory"):
            pass
