"""Loading a user's own enrichment function from a ``"package.module:function"`` spec.

Not every upstream fits the HTTP config (gRPC, SDKs, several calls per record), so the
Spark job can run any async function instead, named in the job config as a string.
Loading happens on the executor, so errors must say precisely what is wrong with the
spec: the job log is often the only place a user sees them.

Two shapes are accepted:

* an async function (or an object whose ``__call__`` is async): ``load_user_function``;
* a factory: a zero-argument callable returning an async context manager that yields
  such a function, e.g. an ``@asynccontextmanager`` that opens a client session once
  per partition. ``open_user_function`` handles both shapes.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeGuard

AsyncFunction = Callable[[Any], Awaitable[Any]]


class UserFunctionError(ValueError):
    """The spec is malformed, or names something missing or of the wrong kind."""


def _resolve(spec: str) -> Any:
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise UserFunctionError(
            f"user function spec must look like 'package.module:function', got {spec!r}"
        )
    module_name, attribute = spec.split(":")
    if not module_name or not attribute:
        raise UserFunctionError(
            f"user function spec must look like 'package.module:function', got {spec!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserFunctionError(
            f"cannot import module {module_name!r} for {spec!r}: {exc}"
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UserFunctionError(
                f"{spec!r}: {module_name} has no attribute {attribute!r}"
            ) from None
    return target


def _is_async_callable(obj: Any) -> TypeGuard[AsyncFunction]:
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)  # noqa: B004 - callable() says nothing about async
    return not inspect.isclass(obj) and inspect.iscoroutinefunction(call)


def load_user_function(spec: str) -> AsyncFunction:
    """The async function named by ``spec``; raises UserFunctionError otherwise."""
    target = _resolve(spec)
    if _is_async_callable(target):
        return target
    if callable(target):
        raise UserFunctionError(
            f"{spec!r} is not an async function (define it with 'async def'); "
            "a factory returning an async context manager needs open_user_function()"
        )
    raise UserFunctionError(f"{spec!r} is a {type(target).__name__}, not an async function")


@asynccontextmanager
async def open_user_function(spec: str) -> AsyncIterator[AsyncFunction]:
    """Yields the async function named by ``spec``, entering its factory's context first
    when ``spec`` names a factory (and leaving it at the end)."""
    target = _resolve(spec)
    if _is_async_callable(target):
        yield target
        return
    if not callable(target):
        raise UserFunctionError(f"{spec!r} is a {type(target).__name__}, not an async function")
    made = target()
    if not (hasattr(made, "__aenter__") and hasattr(made, "__aexit__")):
        raise UserFunctionError(
            f"{spec!r} is neither an async function nor a factory of an async context "
            f"manager (calling it returned a {type(made).__name__})"
        )
    async with made as function:
        if not _is_async_callable(function):
            raise UserFunctionError(
                f"the context manager from {spec!r} yielded a {type(function).__name__}, "
                "not an async function"
            )
        yield function
