from labgov.accounts import access
from labgov.funding.models import Allocation, FundingSource


def funding_source_list_for_user(user):
    return FundingSource.objects.for_dashboard(user)


def my_allocations(user) -> list:
    """The allocations a person holds, with their figures."""
    return list(Allocation.objects.for_dashboard(user).filter(user=user))


def funding_source_for_user(user, pk: int, *, write: bool = False) -> FundingSource:
    """The funding source if the user may see it (else 404); with write, may change it (else
    403)."""
    funding_source = access.get_or_404(
        FundingSource.objects.visible_to(user).select_related("lab", "institution").with_figures(),
        pk=pk,
    )
    if write:
        access.deny_unless(
            access.can_write_funding_source(
                user, lab_id=funding_source.lab_id, institution_id=funding_source.institution_id
            )
        )
    return funding_source
