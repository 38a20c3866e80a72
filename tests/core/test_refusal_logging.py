import logging

import pytest

pytestmark = pytest.mark.django_db


def test_a_refused_page_is_logged_as_one_line_without_a_traceback(world, client_for, caplog):
    caplog.set_level(logging.WARNING, logger="django.request")
    response = client_for(world.member).get("/funding/new/")
    assert response.status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert len(records) == 1
    assert records[0].getMessage() == "Forbidden (Permission denied): /funding/new/"
    assert records[0].exc_info is None and records[0].exc_text is None
