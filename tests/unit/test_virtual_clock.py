"""The test loop's clock (``tests/virtual_clock.py``): waits pass without wall time, in
order, and a deadline fires when the code has waited that long."""

import asyncio
import time

import pytest

from tests.virtual_clock import run_on_virtual_clock


def test_sleeps_take_their_time_on_the_loop_clock_and_none_on_the_wall():
    async def main():
        loop = asyncio.get_running_loop()
        woke = []

        async def sleeper(seconds):
            await asyncio.sleep(seconds)
            woke.append((seconds, loop.time()))

        await asyncio.gather(sleeper(30), sleeper(5), sleeper(600))
        return woke

    started = time.monotonic()
    assert run_on_virtual_clock(main()) == [(5, 5.0), (30, 30.0), (600, 600.0)]
    assert time.monotonic() - started < 60  # ten minutes of loop time in much less


def test_a_deadline_fires_after_the_wait_and_not_before():
    async def main():
        await asyncio.wait_for(asyncio.sleep(0.19), timeout=0.2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(0.21), timeout=0.2)
        return asyncio.get_running_loop().time()

    assert run_on_virtual_clock(main()) == pytest.approx(0.39)


def test_real_io_still_wakes_the_loop():
    async def echo(reader, writer):
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def main():
        async with await asyncio.start_server(echo, "127.0.0.1", 0) as server:
            reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
            writer.write(b"ping\n")
            answer = await reader.readline()
            writer.close()
            return answer

    assert run_on_virtual_clock(main()) == b"ping\n"
