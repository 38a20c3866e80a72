import pytest
from django.db import DatabaseError, connection, transaction

from labgov.audit.models import AuditEvent
from labgov.audit.services import audit_record
from labgov.core.append_only import AppendOnlyError


@pytest.mark.django_db(transaction=True)
def test_audit_record_requires_the_changes_transaction():
    from tests.factories import LabFactory

    lab = LabFactory()
    with pytest.raises(RuntimeError, match="transaction"):
        audit_record(actor=None, action="x", target=lab, institution_id=None)


def test_audit_events_are_append_only(world):
    with transaction.atomic():
        event = audit_record(
            actor=world.inst_admin,
            action="lab.touch",
            target=world.lab,
            institution_id=world.institution.pk,
        )
    assert event.target_type == "accounts.lab"
    assert event.after["name"] == "Vision"
    with pytest.raises(AppendOnlyError):
        event.delete()
    with pytest.raises(AppendOnlyError):
        AuditEvent.objects.filter(pk=event.pk).update(action="y")
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditevent")
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_a_failed_change_leaves_no_audit_event(world):
    from decimal import Decimal

    from labgov.core.errors import DomainError
    from labgov.funding.services import funding_source_update

    with pytest.raises(DomainError):
        funding_source_update(
            actor=world.finance, funding_source=world.funding_source, amount_usd=Decimal("-1")
        )
    assert not AuditEvent.objects.filter(action="funding_source.update").exists()
