"""The Django admin covers every model (billing records excepted: Django's admin does not
support their composite primary key), and its changelists open."""

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from labgov.runpod.models import BillingRecord

OWN_APPS = {
    "core",
    "accounts",
    "audit",
    "funding",
    "dashboard",
    "runpod",
    "usage",
    "notifications",
    "provisioning",
    "alerts",
}


def test_every_model_is_in_the_admin():
    missing = [
        m._meta.label
        for m in apps.get_models()
        if m._meta.app_label in OWN_APPS
        and m not in admin.site._registry
        and m is not BillingRecord
    ]
    assert missing == []


@pytest.mark.parametrize(
    "model",
    [m for m in admin.site._registry if m._meta.app_label in OWN_APPS],
    ids=lambda m: m._meta.label,
)
def test_changelists_open(world, client, model):
    world.inst_admin.is_staff = world.inst_admin.is_superuser = True
    world.inst_admin.save()
    client.force_login(world.inst_admin)
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    assert client.get(url).status_code == 200
