"""A request's page reads it with the eight tables it points at, joined in the order written
(labgov/core/joins.py): the same request for whoever may see it, a 404 for the others."""

import pytest
from django.http import Http404

from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.selectors import request_for_user


def test_a_request_is_found_for_whoever_sees_it_and_hidden_from_others(world, submitted):
    req = submitted()
    for user in (world.member, world.lab_admin, world.inst_admin, world.finance):
        found = request_for_user(user, req.pk)
        assert found == req and found.lab == world.lab and found.allocation.user == world.member
    for user in (world.other_member, world.outsider):
        with pytest.raises(Http404):
            request_for_user(user, req.pk)
    assert ProvisioningRequest.objects.filter(pk=req.pk).exists()
