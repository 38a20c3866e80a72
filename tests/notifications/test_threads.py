"""A story is one notification per person (its thread) that each event updates in place;
emails follow each person's choice (at once, or the daily digest); texts put together from
pieces never read ".." or "word ."."""

import datetime as dt

import pytest
import time_machine
from django.core import mail
from django.urls import reverse

from labgov.notifications.models import EmailChoice, Notification
from labgov.notifications.services import (
    digest_send,
    email_delivery_save,
    notify,
    tidy,
)
from tests.factories import UserFactory

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)


def _event(users, key, subject, body="", quiet=(), **kw):
    return notify(
        recipients=users,
        quiet_recipients=quiet,
        kind="test.alpha",
        subject=subject,
        body=body,
        url="/retention/1/",
        dedupe_key=key,
        thread_key="case:1",
        **kw,
    )


def test_each_event_updates_the_persons_one_notification_and_marks_it_unread(db):
    a = UserFactory()
    with time_machine.travel(T0, tick=False):
        _event([a], "e1", "Due in 30 days")
    Notification.objects.update(read_at=T0)
    with time_machine.travel(T0 + dt.timedelta(days=23), tick=False):
        _event([a], "e2", "Due in 7 days")
    (row,) = Notification.objects.filter(recipient=a)
    assert row.subject == "Due in 7 days" and row.read_at is None
    assert row.created_at == T0 + dt.timedelta(days=23) and row.times_told == 2


def test_the_same_event_or_the_same_words_tell_nobody_twice(db):
    a = UserFactory()
    assert len(_event([a], "e1", "Due in 30 days")) == 1
    Notification.objects.update(read_at=T0)
    assert _event([a], "e1", "Due in 30 days") == []  # the same event reported again
    assert _event([a], "e2", "Due in 30 days") == []  # another event, the same words
    (row,) = Notification.objects.filter(recipient=a)
    assert row.times_told == 1 and row.read_at == T0


def test_people_not_concerned_see_the_words_change_but_are_not_told(db):
    owner, admin, stranger = UserFactory(), UserFactory(), UserFactory()
    _event([owner, admin], "e1", "Due in 30 days")
    Notification.objects.update(read_at=T0)
    _event([owner], "e2", "Kept until 2027", quiet=[admin, stranger])
    mine = Notification.objects.get(recipient=owner)
    theirs = Notification.objects.get(recipient=admin)
    assert (mine.subject, mine.read_at, mine.times_told) == ("Kept until 2027", None, 2)
    assert (theirs.subject, theirs.read_at, theirs.times_told) == ("Kept until 2027", T0, 1)
    # Following the story gives nobody a notification they never had.
    assert not Notification.objects.filter(recipient=stranger).exists()


def test_an_update_is_emailed_again_as_its_person_chose(db, django_capture_on_commit_callbacks):
    at_once, daily = UserFactory(), UserFactory()
    email_delivery_save(actor=at_once, delivery=EmailChoice.Delivery.IMMEDIATE)
    with django_capture_on_commit_callbacks(execute=True):
        _event([at_once, daily], "e1", "Due in 30 days")
    assert [m.to for m in mail.outbox] == [[at_once.email]]
    assert digest_send(recipient_id=at_once.pk) == 0  # emailed already
    assert digest_send(recipient_id=daily.pk) == 1
    assert "Due in 30 days" in mail.outbox[1].body
    with django_capture_on_commit_callbacks(execute=True):
        _event([at_once, daily], "e2", "Due in 7 days")
    assert [m.to for m in mail.outbox][2:] == [[at_once.email]]
    assert "Due in 7 days" in mail.outbox[2].subject
    assert digest_send(recipient_id=daily.pk) == 1
    assert "Due in 7 days" in mail.outbox[3].body


def test_critical_is_emailed_at_once_whatever_the_choice(db, django_capture_on_commit_callbacks):
    daily = UserFactory()
    email_delivery_save(actor=daily, delivery=EmailChoice.Delivery.DIGEST)
    with django_capture_on_commit_callbacks(execute=True):
        _event([daily], "e1", "Not deleted", severity="critical")
    assert [m.to for m in mail.outbox] == [[daily.email]]


def test_a_made_up_delivery_is_refused_in_words(db):
    from labgov.core.errors import DomainError

    with pytest.raises(DomainError, match="at once or the daily digest"):
        email_delivery_save(actor=UserFactory(), delivery="hourly")


def test_the_settings_page_saves_the_choice(world, client_for, test_kinds):
    client = client_for(world.member)
    url = reverse("notifications:settings")
    assert "Each at once" in client.get(url).content.decode()
    response = client.post(url, {"delivery": "immediate", "muted": []})
    assert response.status_code == 302
    assert EmailChoice.objects.get(user=world.member).delivery == "immediate"
    page = client.post(url, {"delivery": "hourly"}).content.decode()
    assert "Select a valid choice" in page
    assert EmailChoice.objects.get(user=world.member).delivery == "immediate"


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        ("kept it: Opened by hand.. Its due date", "kept it: Opened by hand. Its due date"),
        ("as requested by x .", "as requested by x."),
        ("Stop it!.", "Stop it!"),
        ("wait ... and see...", "wait ... and see..."),
        ("costs $0.20/GB/month.", "costs $0.20/GB/month."),
    ],
)
def test_texts_put_together_read_as_one(pieces, expected):
    assert tidy(pieces) == expected


def test_notify_stores_tidy_words(db):
    a = UserFactory()
    _event([a], "e1", "Retention: a volume was kept .", body="They kept it: results copied..")
    row = Notification.objects.get(recipient=a)
    assert (
        row.subject == "Retention: a volume was kept."
        and row.body == "They kept it: results copied."
    )


def test_the_list_shows_one_row_per_story_with_a_fixed_query_count(
    world, client_for, django_assert_num_queries
):
    client = client_for(world.member)
    for i in range(3):
        _event([world.member], f"e{i}", f"Step {i}")
    # session, user, the role scope (nav), the page's count, the page
    with django_assert_num_queries(5):
        page = client.get(reverse("notifications:list")).content.decode()
    assert "Step 2" in page and "Step 1" not in page
    for i in range(20):
        notify(
            recipients=[world.member],
            kind="test.alpha",
            subject=f"Story {i}",
            dedupe_key=f"s{i}",
            thread_key=f"story:{i}",
        )
    with django_assert_num_queries(5):
        client.get(reverse("notifications:list"))


def test_runpods_own_full_stop_does_not_double_in_labgovs_words():
    """Runpod's problem details end in a full stop as often as not; labgov's sentence
    around them must not read ".."."""
    from types import SimpleNamespace

    from labgov.provisioning.services.provision import explain
    from labgov.retention.deletion import _refusal_words
    from labgov.runpod.errors import RunpodError, RunpodRequestInvalid

    invalid = RunpodRequestInvalid("bad", status=400, detail="gpuCount must be positive.")
    odd = RunpodError("HTTP 418: I am a teapot.", status=418)
    pod_case = SimpleNamespace(resource=SimpleNamespace(kind="pod"))
    texts = [
        explain(invalid),
        explain(odd),
        _refusal_words(pod_case, RunpodError("x", status=400, detail="The pod is locked.")),
    ]
    assert "must be positive. If the request" in texts[0]
    assert "I am a teapot. Retry" in texts[1]
    assert texts[2].endswith("The pod is locked")
    for text in texts:
        assert ".." not in text.replace("...", ""), text
