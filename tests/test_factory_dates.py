"""The factories' default dates cover the simulator's fixed day and the machine's, so no test
depends on the day the suite runs."""

import datetime as dt

from labgov.simulator import load_scenario
from tests.factories import SCENARIO_DAY, _since, _until


def test_the_factories_know_the_simulators_day():
    assert load_scenario("default").now.date() == SCENARIO_DAY


def test_default_dates_cover_both_clocks():
    import time_machine

    for today in (
        dt.date(2026, 1, 1),
        dt.date(2026, 12, 1),
        dt.date(2027, 3, 1),
        dt.date(2031, 7, 4),
    ):
        with time_machine.travel(
            dt.datetime(today.year, today.month, today.day, 12, tzinfo=dt.UTC)
        ):
            for day in (today, SCENARIO_DAY, SCENARIO_DAY - dt.timedelta(days=31)):
                assert _since(100) <= day <= _until(265)
