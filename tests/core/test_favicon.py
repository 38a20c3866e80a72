import re

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_every_page_names_an_icon_that_exists(client):
    """Without one, browsers ask for /favicon.ico on every page and log a 404."""
    page = client.get("/login/").content.decode()
    href = re.search(r'<link rel="icon" href="/static/([^"]+)"', page)
    assert href is not None
    assert finders.find(href.group(1)) is not None


def test_the_admin_names_alert_settings_once():
    from labgov.alerts.models import AlertSettings

    assert AlertSettings._meta.verbose_name_plural == "alert settings"
