"""How one partition's request rate is paced: its rate controller (``rate_control.py``),
started at the share its predecessor in the worker found (``learned_rates.py``) and
sharing what the executor's tasks found (``executor_board.py``), or tied to the
executor's schedule of a given rate (``executor_rate.py``), and what it leaves for the
next partition when it ends."""

from __future__ import annotations

from . import learned_rates
from .config import HttpEnricherConfig
from .executor_board import open_board
from .executor_rate import open_schedule
from .rate_control import START_RATE, RateController


class RatePacing:
    """The rate controller of one partition's enricher, from construction to :meth:`close`."""

    def __init__(self, config: HttpEnricherConfig) -> None:
        self._key = learned_rates.key_for(config)
        given = config.requests_per_second
        self._schedule = None
        self._board = None
        if given is not None:
            self._schedule = open_schedule(self._key, given, config.partitions)
        else:
            self._board = open_board(self._key)
        # Paced with the executor's other tasks, a task alone may use their share too.
        ceiling = config.rate_per_partition if self._schedule is None else given
        learned = learned_rates.recall(self._key)
        share = learned.rate if learned is not None and learned.limited else None
        floor = learned.rate if learned is not None and not learned.limited else 0.0
        self.controller = RateController(
            ceiling,
            window=config.throttle_window,
            share=config.throttle_share,
            start_rate=max(START_RATE, floor),  # slow start goes on from a floor found
            learned=share,
            shared=self._schedule,
            board=self._board,
        )

    def close(self) -> None:
        """Leave the share found to the next partition and the executor's other tasks;
        give back the executor slot."""
        controller = self.controller
        if controller.ceiling is None:
            found = controller.found()
            if found is not None:
                learned_rates.remember(self._key, found)
        if self._schedule is not None:
            self._schedule.close()
            self._schedule = None
        if self._board is not None:
            self._board.leave()
            self._board = None
