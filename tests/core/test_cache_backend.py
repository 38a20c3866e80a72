"""labgov's Redis cache backend: Django's, with one Redis client kept per connection pool
instead of one made for every operation; against the test run's Redis."""

import os
import threading
import uuid

import pytest

from labgov.core.cache import RedisCache

REDIS_URL = os.environ.get("LABGOV_TEST_REDIS_URL")
REQUIRE = os.environ.get("LABGOV_REQUIRE_SERVICES") == "1"


@pytest.fixture
def cache():
    if not REDIS_URL:
        if REQUIRE:
            pytest.fail("LABGOV_REQUIRE_SERVICES=1 but LABGOV_TEST_REDIS_URL is not set")
        pytest.skip("needs Redis (make test sets LABGOV_TEST_REDIS_URL when it answers)")
    backend = RedisCache(REDIS_URL, {"KEY_PREFIX": f"test-cache-{uuid.uuid4().hex}"})
    yield backend
    client = backend._cache.get_client(write=True)
    keys = list(client.scan_iter(match=f"{backend.key_prefix}*"))
    if keys:
        client.delete(*keys)


def test_one_client_serves_every_operation_and_they_all_work(cache):
    client = cache._cache.get_client(write=True)
    assert cache._cache.get_client() is client  # one server: reads use the writers' pool
    cache.set("a", {"x": 1}, 60)
    assert cache.get("a") == {"x": 1}
    assert cache.add("a", "other", 60) is False
    cache.set("n", 1, 60)
    assert cache.incr("n", 2) == 3
    cache.set_many({"b": "B", "c": "C"}, 60)
    assert cache.get_many(["a", "b", "c", "missing"]) == {"a": {"x": 1}, "b": "B", "c": "C"}
    cache.delete_many(["b", "c"])
    assert cache.get("b") is None
    assert cache.touch("a", 120) is True
    assert cache._cache.get_client(write=True) is client


def test_threads_share_the_client_without_mixing_answers(cache):
    errors = []

    def work(n: int) -> None:
        try:
            for i in range(50):
                cache.set(f"t{n}-{i}", n * 1000 + i, 60)
                if cache.get(f"t{n}-{i}") != n * 1000 + i:
                    errors.append((n, i))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
