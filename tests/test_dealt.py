"""The order tests/conftest.py gives xdist's workers: every test once, the slow ones at the
start of the workers' first blocks, a module's slow tests together."""

from dataclasses import dataclass

import pytest

from tests.conftest import SLOW_FIRST, _dealt


@dataclass(frozen=True)
class Item:
    nodeid: str
    marker: str | None = None

    def get_closest_marker(self, name):
        return name if name == self.marker else None


def _collection() -> list[Item]:
    slow = [Item(f"{prefix}::test_{n}") for prefix in SLOW_FIRST for n in range(2)]
    marked = [
        Item(f"tests/x/test_browser_{m}.py::test_{n}", "browser")
        for m in range(3)
        for n in range(3)
    ]
    short = [Item(f"tests/y/test_{n // 10}.py::test_{n}") for n in range(300)]
    return slow + marked + short  # as pytest_collection_modifyitems sorted them


def _blocks(order: list, workers: int) -> list[list]:
    """The contiguous blocks xdist's work stealing hands out first (worksteal.check_schedule)."""
    blocks, start, remaining = [], 0, len(order)
    for number in range(workers):
        size = remaining // (workers - number)
        blocks.append(order[start : start + size])
        start, remaining = start + size, remaining - size
    return blocks


@pytest.mark.parametrize("workers", [2, 3, 4, 7])
def test_every_test_once_and_the_slow_ones_spread(workers):
    items = _collection()
    order = _dealt(items, workers)
    assert sorted(order, key=lambda i: i.nodeid) == sorted(items, key=lambda i: i.nodeid)
    slow = {i for i in items if i.nodeid.startswith(SLOW_FIRST) or i.marker is not None}
    blocks = _blocks(order, workers)
    for block in blocks:
        # Each block starts with its slow tests, then the short ones.
        ranks = [i in slow for i in block]
        assert ranks == sorted(ranks, reverse=True)
    # Dealt evenly, a module's slow tests at a time: as many modules to each block, give or
    # take one, and the longest first (each block starts with one of the first modules).
    modules = [{i.nodeid.split("::")[0] for i in block if i in slow} for block in blocks]
    counts = [len(m) for m in modules]
    assert max(counts) - min(counts) <= 1, counts
    first = list(dict.fromkeys(i.nodeid.split("::")[0] for i in items if i in slow))[:workers]
    assert {block[0].nodeid.split("::")[0] for block in blocks} == set(first)


def test_a_modules_slow_tests_stay_together():
    items = _collection()
    order = _dealt(items, 3)
    for module in {i.nodeid.split("::")[0] for i in items if "/y/" not in i.nodeid}:
        places = [n for n, i in enumerate(order) if i.nodeid.startswith(module + "::")]
        assert places == list(range(places[0], places[0] + len(places))), module
