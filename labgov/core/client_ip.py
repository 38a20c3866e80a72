"""The address a request came from, for login throttling.

Behind nginx every request comes from 127.0.0.1; nginx appends the address it saw to
X-Forwarded-For. Only a proxy in LABGOV_TRUSTED_PROXIES is believed, and the client is the
right-most address that is not one of them: what a client writes into X-Forwarded-For itself
lands left of that, so it cannot pick the address it is counted under.
"""

import ipaddress
from functools import lru_cache

from django.conf import settings


@lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in _networks(tuple(settings.LABGOV_TRUSTED_PROXIES)))


def client_ip(request) -> str:
    remote = request.META.get("REMOTE_ADDR", "")
    if not _trusted(remote):
        return remote
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    for address in reversed([a.strip() for a in forwarded.split(",") if a.strip()]):
        if not _trusted(address):
            return address
    return remote
