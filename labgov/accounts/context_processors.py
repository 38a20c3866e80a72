from django.utils.functional import SimpleLazyObject

from labgov.accounts.access import scope_for


def scope(request):
    return {"scope": SimpleLazyObject(lambda: scope_for(request.user))}
