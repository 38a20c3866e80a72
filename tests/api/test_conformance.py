"""schemathesis against the live API (a real HTTP server), with a token per role: every
operation of the checked-in schema as a role drawn for each case, with generated input and
with the ids of real objects;
no answer may be a 500, and every answer must be one the schema describes (status, media
type, body). Bounded and derandomized, so it runs the same every time in a few seconds."""

import itertools

import pytest
import requests
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from labgov.api.docs import SCHEMA_FILE
from labgov.api.services import token_create
from tests.api.fixtures import make_alert, make_invoice, make_retention_case
from tests.factories import ResourceFactory, RunpodAccountFactory
from tests.provisioning.conftest import (  # noqa: F401 - fixtures
    catalog,
    draft,
    flushable_append_only,
    submitted,
)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("flushable_append_only"),
]

ROLES = ["inst_admin", "finance", "lab_admin", "member", "outsider"]
EXAMPLES = 4
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _known_ids(world, draft, submitted):  # noqa: F811
    # An inactive account: a sync request is refused in words instead of reaching out.
    account = RunpodAccountFactory(institution=world.institution, is_active=False)
    invoice = make_invoice(world)
    return {
        "institutions": world.institution.pk,
        "labs": world.lab.pk,
        "memberships": world.member.memberships.get().pk,
        "funding-sources": world.funding_source.pk,
        "allocations": world.allocation.pk,
        "ledger-entries": 1,
        "provisioning-requests": submitted().pk,
        "runpod-accounts": account.pk,
        "resources": ResourceFactory(account=account, current_allocation=world.allocation).pk,
        "alerts": make_alert(world).pk,
        "notifications": 1,
        "invoices": invoice.pk,
        "invoice-lines": invoice.lines.get(kind="usage").pk,
        "retention-cases": make_retention_case(world, account).pk,
    }


def test_live_api_conforms_to_its_schema(live_server, world, draft, submitted):  # noqa: F811
    schema = schemathesis.openapi.from_dict(yaml.safe_load(SCHEMA_FILE.read_text()))
    known = _known_ids(world, draft, submitted)
    draft()
    tokens = {
        role: token_create(actor=getattr(world, role), name="st", scope="write", days=1)[1]
        for role in ROLES
    }
    session = requests.Session()
    turns = itertools.count()
    calls = 0

    roles_seen = set()
    for result in schema.get_all_operations():
        operation = result.ok()
        resource = operation.path.removeprefix("/api/v1/").split("/")[0]

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(), role=st.sampled_from(ROLES))
        def call(case, role):
            nonlocal calls
            # Every other case names a real object, so more than the 404 path is walked.
            if "id" in (case.path_parameters or {}) and next(turns) % 2 == 0:
                case.path_parameters["id"] = known.get(resource, 1)  # noqa: B023 - run at once
            headers = {"Authorization": f"Bearer {tokens[role]}"}
            response = case.call(base_url=live_server.url, session=session, headers=headers)
            calls += 1
            roles_seen.add(role)
            case.validate_response(response, checks=CHECKS)

        call()
    session.close()
    assert calls >= 25 * EXAMPLES and roles_seen == set(ROLES)
