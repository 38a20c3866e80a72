""" "Sync now" without a broker (`make run`): the sync runs in a thread beside the request,
which answers at once, and the account page follows it (starting, running, done)."""

import threading

import pytest
from django.urls import reverse

from labgov.runpod.models import SyncRun

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("at_sim_now")]


def test_sync_now_answers_at_once_and_the_page_follows_the_sync(
    world, sim_account, client_for, settings, monkeypatch
):
    settings.LABGOV_SYNC_NOW_BESIDE = True
    from labgov.runpod import services, tasks

    release, threads = threading.Event(), []
    real_sync = tasks.sync_account

    def held_sync(*args):
        assert release.wait(30), "the test never let the sync go"
        return real_sync(*args)

    monkeypatch.setattr(tasks, "sync_account", held_sync)
    beside = services._sync_beside
    monkeypatch.setattr(services, "_sync_beside", lambda *a: threads.append(beside(*a)))

    client = client_for(world.inst_admin)
    response = client.post(reverse("runpod:account_sync", args=[sim_account.pk]))
    # The request answered while the sync waits in its thread: it did not run the sync.
    assert response.status_code == 302 and "?requested=" in response["Location"]
    assert threads and threads[0].is_alive()
    assert not SyncRun.objects.filter(account=sim_account).exists()
    page = client.get(response["Location"]).content.decode()
    assert "Sync starting…" in page and 'hx-trigger="every 2s"' in page

    release.set()
    threads[0].join(60)
    run = SyncRun.objects.get(account=sim_account)
    assert run.status == SyncRun.Status.SUCCEEDED and run.trigger == SyncRun.Trigger.MANUAL
    assert run.triggered_by == world.inst_admin
    page = client.get(response["Location"]).content.decode()
    assert "Sync starting…" not in page and 'hx-trigger="every 2s"' not in page


def test_a_stale_or_forged_request_time_polls_nothing(world, sim_account, client_for):
    url = reverse("runpod:account_detail", args=[sim_account.pk])
    client = client_for(world.inst_admin)
    for value in ("1", "x" * 20, "-5", "99999999999999999999", "999999999999"):
        page = client.get(f"{url}?requested={value}").content.decode()
        assert "Sync starting…" not in page and 'hx-trigger="every 2s"' not in page
