import pytest

from labgov.notifications.kinds import Severity, all_kinds, get_kind, label_for, register
from labgov.provisioning.apps import NOTIFICATION_KINDS
from labgov.provisioning.services.events import SUBJECTS


def test_provisioning_registers_every_kind_it_sends():
    assert set(NOTIFICATION_KINDS) == {f"provisioning.{event}" for event in SUBJECTS}
    registered = {k.key: k for k in all_kinds()}
    for kind, (label, severity) in NOTIFICATION_KINDS.items():
        assert registered[kind].label == label
        assert registered[kind].default_severity == severity
    assert registered["provisioning.fail"].default_severity == Severity.CRITICAL


def test_an_unregistered_kind_is_its_own_label_and_info():
    assert label_for("nobody.registered.this") == "nobody.registered.this"
    assert get_kind("nobody.registered.this").default_severity == "info"


def test_register_rejects_unknown_severities():
    with pytest.raises(ValueError, match="severity"):
        register("test.bad", "Bad", "urgent")
