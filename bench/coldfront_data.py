"""Scale ColdFront's own test data (`coldfront load_test_data`) to N times itself.

Run by ColdFront's Python (its venv, DJANGO_SETTINGS_MODULE=coldfront.config.settings, the
database in DB_URL), after `load_test_data`: bench/coldfront.py does it. load_test_data makes
50 people and an admin, 16 resources, and two PIs' projects (one with 4 allocations, one with a
grant, 4 publications and 2 allocations), with their attributes and memberships. This makes
N - 1 more copies of every person and of everything the two projects hold, through ColdFront's
own models and their save() (history rows, user profiles and attribute usages as ColdFront
makes them), so the admin's lists are N times as long and every table the PI's pages read is
N times as big. The resources stay shared, as a centre's are. Every copy of a person has the
same password as its original (the hash is copied: hashing 5,000 passwords would take longer
than the benchmark). Prints a JSON summary.
"""

import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "coldfront.config.settings")
django.setup()

from coldfront.core.allocation.models import (  # noqa: E402
    Allocation,
    AllocationAttribute,
    AllocationAttributeUsage,
    AllocationUser,
)
from coldfront.core.grant.models import Grant  # noqa: E402
from coldfront.core.project.models import Project, ProjectAttribute, ProjectUser  # noqa: E402
from coldfront.core.publication.models import Publication  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import transaction  # noqa: E402

SKIP = {"id", "created", "modified"}


def _copy(obj, **changes):
    """A new row of obj's model with obj's values but `changes` (saved with the model's save)."""
    values = {
        field.attname: getattr(obj, field.attname)
        for field in obj._meta.concrete_fields
        if field.attname not in SKIP and not field.primary_key
    }
    values.update(
        {
            f"{name}_id" if hasattr(v, "pk") else name: getattr(v, "pk", v)
            for name, v in changes.items()
        }
    )
    new = type(obj)(**values)
    new.save()
    return new


def main() -> None:
    times = int(sys.argv[1])
    people = list(
        User.objects.exclude(username="admin").select_related("userprofile").order_by("id")
    )
    projects = list(Project.objects.order_by("id"))
    if Project.objects.count() != 2 or len(people) != 50:
        raise SystemExit("expected load_test_data's 50 people and 2 projects, and nothing else")
    allocations = list(Allocation.objects.filter(project__in=projects).order_by("id"))
    for copy in range(1, times):
        with transaction.atomic():
            person = {}
            for user in people:
                username = f"{user.username}{copy:03d}"
                new = _copy(user, username=username, email=f"{username}@example.com")
                new.userprofile.is_pi = user.userprofile.is_pi
                new.userprofile.save()
                person[user.pk] = new
            project = {}
            for old in projects:
                new = _copy(old, pi=person[old.pi_id])
                project[old.pk] = new
                for member in ProjectUser.objects.filter(project=old):
                    _copy(member, project=new, user=person[member.user_id])
                for attribute in ProjectAttribute.objects.filter(project=old):
                    _copy(attribute, project=new)
                for grant in Grant.objects.filter(project=old):
                    _copy(grant, project=new)
                for publication in Publication.objects.filter(project=old):
                    _copy(publication, project=new)
            for old in allocations:
                new = _copy(old, project=project[old.project_id])
                new.resources.set(old.resources.all())
                for attribute in AllocationAttribute.objects.filter(allocation=old):
                    new_attribute = _copy(attribute, allocation=new)
                    usage = AllocationAttributeUsage.objects.filter(
                        allocation_attribute=attribute
                    ).first()
                    if usage is not None:
                        new_attribute.allocationattributeusage.value = usage.value
                        new_attribute.allocationattributeusage.save()
                for member in AllocationUser.objects.filter(allocation=old):
                    _copy(member, allocation=new, user=person[member.user_id])
    print(
        json.dumps(
            {
                "times": times,
                "users": User.objects.count(),
                "projects": Project.objects.count(),
                "allocations": Allocation.objects.count(),
                "allocation_attributes": AllocationAttribute.objects.count(),
                "allocation_users": AllocationUser.objects.count(),
                "publications": Publication.objects.count(),
            }
        )
    )


if __name__ == "__main__":
    main()
