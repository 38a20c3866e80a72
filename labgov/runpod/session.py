"""The HTTP side of the Runpod client: one kept-alive connection pool per account, bounded
retries, and Runpod's errors turned into the exceptions of `errors.py` with readable messages.

Every request is bounded: at most `max_attempts` sends and `deadline_s` seconds in all, waits
included, and each send's timeouts are cut to the time left. Retried is only what can succeed
on a retry: 429 (after its Retry-After), 5xx other than 501, 408, network errors and timeouts,
and a 2xx body that `read` finds cut short. Not retried: 501 Not Implemented (the server does
not do this and will not next time), every other 4xx, and a redirect (it means a wrong base
URL; following it could send the key elsewhere).

A request that is not idempotent (creating a pod) is retried only when it certainly did not
reach Runpod (no connection was made) or on a 429; any other failure raises
RunpodOutcomeUnknown.

The API key goes in the Authorization header and nowhere else: not in logs, messages or repr.
"""

import contextlib
import datetime as dt
import email.utils
import importlib.metadata
import logging
import random
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import httpx
from django.views.decorators.debug import sensitive_variables

from labgov.core.tls import default_context
from labgov.runpod.errors import (
    RunpodAuthError,
    RunpodBadResponse,
    RunpodConflict,
    RunpodError,
    RunpodInsufficientBalance,
    RunpodNotFound,
    RunpodOutcomeUnknown,
    RunpodRequestInvalid,
    RunpodUnavailable,
)
from labgov.runpod.parsing import MalformedBody, decode_json

logger = logging.getLogger("labgov.runpod.client")

try:
    _VERSION = importlib.metadata.version("labgov")
except importlib.metadata.PackageNotFoundError:  # running from a plain checkout
    _VERSION = "0"

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0

# Failures after which the request certainly never reached Runpod.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.ProxyError)
_TRANSPORT_FAILURES = (httpx.TransportError, httpx.DecodingError)

_ERROR_CLASSES: dict[int, type[RunpodError]] = {
    400: RunpodRequestInvalid,
    401: RunpodAuthError,
    402: RunpodInsufficientBalance,
    403: RunpodAuthError,
    404: RunpodNotFound,
    409: RunpodConflict,
    410: RunpodNotFound,
    422: RunpodRequestInvalid,
}
_ERROR_HINTS = {
    401: " Check the API key was copied whole and is not revoked.",
    402: " The Runpod account needs more credit (deploying needs at least an hour's worth).",
    403: (
        " The API key may lack this permission: a read-only key can sync, but creating or"
        " changing resources needs a key with write access."
    ),
}
_API_KEY_SHAPE = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces


class Session:
    """One Runpod account's connection: base URL, key, connection pool and retry policy."""

    @sensitive_variables()  # an error page must not show the key (or the headers carrying it)
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: httpx.Timeout | float,
        max_attempts: int,
        deadline_s: float,
        transport: httpx.BaseTransport | None,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if deadline_s <= 0:
            raise ValueError("deadline_s must be positive")
        self.base_url = _normalise_base_url(base_url)
        self.max_attempts = max_attempts
        self.deadline_s = deadline_s
        self._timeout = httpx.Timeout(timeout)
        self._sleep = sleep
        self._clock = clock
        self._api_key = (api_key or "").strip()
        self._key_problem = _api_key_problem(self._api_key)
        headers = {"Accept": "application/json", "User-Agent": f"labgov/{_VERSION}"}
        if self._key_problem is None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        if httpx.URL(self.base_url).scheme == "http" and not _is_local(self.base_url):
            logger.warning(
                "The Runpod base URL %s is plain http: the API key travels unencrypted",
                self.base_url,
            )
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=self._timeout,
            transport=transport,
            verify=default_context(),
            follow_redirects=False,  # a redirect means a wrong base URL; never resend the key
        )

    @property
    def masked_key(self) -> str:
        """The key's last four characters, for telling keys apart; only for a long key."""
        return "…" + (self._api_key[-4:] if len(self._api_key) >= 12 else "")

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        body: dict | None = None,
        idempotent: bool = True,
        read: Callable[[bytes], Any] | None = None,
        attempts: int | None = None,
        deadline_s: float | None = None,
    ) -> tuple[httpx.Response, Any]:
        """Send until a usable answer, a non-retryable error, or the attempts or time run out.

        `read`, for GETs, turns a 2xx body into the value returned beside the response, and
        raises MalformedBody to have the body fetched again.
        """
        if self._key_problem is not None:
            raise RunpodAuthError(self._key_problem)
        attempts = attempts or self.max_attempts
        started = self._clock()
        deadline = started + (deadline_s or self.deadline_s)
        made = 0
        failure, status, cause, retry_after = "no attempt within the time allowed", None, None, None
        malformed = False
        while made < attempts:
            remaining = deadline - self._clock()
            if remaining <= 0:
                break
            made += 1
            status, cause, retry_after, malformed = None, None, None, False
            logged = ""  # what the retry log says: never a body, so no server text
            try:
                response = self._http.request(
                    method, path, params=params, json=body, timeout=self._timeout_within(remaining)
                )
            except (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.InvalidURL) as exc:
                # Our side could not even form the request: a setting to fix, not a retry.
                raise RunpodRequestInvalid(
                    f"Could not send {method} {path} to {self.base_url}: is the base URL right?"
                ) from exc
            except _TRANSPORT_FAILURES as exc:
                cause, failure = exc, describe_transport_error(exc)
                if not idempotent and not isinstance(exc, _NOT_SENT):
                    raise self._outcome_unknown(method, path, failure) from exc
            else:
                status = response.status_code
                if response.is_success:
                    if read is None:
                        return response, None
                    try:
                        return response, read(response.content)
                    except MalformedBody as exc:
                        cause, malformed, failure = exc, True, f"{exc} ({status})"
                        logged = f"an unreadable {status} answer"
                elif status == 429:
                    failure, retry_after = "429 Too Many Requests", _retry_after_s(response)
                elif (status >= 500 and status != 501) or status == 408:
                    failure = self._status_summary(response)
                    if not idempotent:
                        raise self._outcome_unknown(method, path, failure)
                    retry_after = _retry_after_s(response)
                else:
                    raise self._error_for(method, path, response)
            if made >= attempts:
                break
            wait = retry_after if retry_after is not None else _backoff_s(made)
            if wait >= deadline - self._clock():
                break  # waiting would use up the deadline: give up now, not later
            logger.info(
                "Runpod %s %s: %s; retrying in %.2f s (attempt %d of %d)",
                method, path, logged or _status_label(status) or failure, wait, made + 1, attempts,
            )  # fmt: skip
            self._sleep(wait)
        raise self._gave_up(
            method, path, made, started, failure, status, retry_after, malformed
        ) from cause

    def _timeout_within(self, remaining: float) -> httpx.Timeout:
        def cap(value: float | None) -> float:
            return remaining if value is None else min(value, remaining)

        t = self._timeout
        return httpx.Timeout(
            connect=cap(t.connect), read=cap(t.read), write=cap(t.write), pool=cap(t.pool)
        )

    def _outcome_unknown(self, method: str, path: str, failure: str) -> RunpodOutcomeUnknown:
        return RunpodOutcomeUnknown(
            f"The outcome of {method} {path} is unknown ({failure}): Runpod may already have"
            " created the pod. Look for the pod on Runpod (by its name) before creating it"
            " again, or a second one may be created and billed."
        )

    def _gave_up(self, method, path, made, started, failure, status, retry_after, malformed):
        elapsed = self._clock() - started
        took = f"in {elapsed:.0f} s" if elapsed >= 1 else "within a second"
        tried = f"{made} attempt{'s' if made != 1 else ''} {took}"
        if malformed:
            return RunpodBadResponse(
                f"Runpod's answer to {method} {path} was unreadable after {tried} ({failure}).",
                status=status,
            )
        if status == 429:
            asked = f"; Runpod asked to wait {retry_after:.0f} s" if retry_after is not None else ""
            return RunpodUnavailable(
                f"Runpod is rate-limiting this API key (429 Too Many Requests): gave up on"
                f" {method} {path} after {tried}{asked}.",
                status=429,
                retry_after_s=retry_after,
            )
        return RunpodUnavailable(
            f"Runpod gave no usable answer to {method} {path} after {tried} (last: {failure}).",
            status=status,
            retry_after_s=retry_after,
        )

    def _error_for(self, method: str, path: str, response: httpx.Response) -> RunpodError:
        status = response.status_code
        if 300 <= status < 400:
            # Where it pointed is not repeated: a message must not carry what a server chose
            # to say (and the key was not sent there).
            return RunpodBadResponse(
                f"The server at {self.base_url} redirected {method} {path} ({status})"
                " elsewhere; labgov does not follow redirects: is the base URL right?",
                status=status,
            )
        title, detail, errors = self._problem(response)
        cls = _ERROR_CLASSES.get(status, RunpodRequestInvalid if status < 500 else RunpodError)
        lead = "Runpod refused the API key" if status == 401 else "Runpod refused the request"
        label, explanation = self._status_parts(response)
        message = f"{lead} ({label})"
        if explanation:
            message += f": {explanation}"
        if errors:
            message += (": " if not explanation else " - ") + "; ".join(errors)
        message = message.rstrip(".") + "." + _ERROR_HINTS.get(status, "")
        return cls(message, status=status, title=title, detail=detail, errors=errors)

    def _status_summary(self, response: httpx.Response) -> str:
        """`503 Service Unavailable: down for maintenance`, for retry logs and messages."""
        label, explanation = self._status_parts(response)
        return f"{label}: {explanation}" if explanation else label

    def _status_parts(self, response: httpx.Response) -> tuple[str, str]:
        """("409 Conflict", "pod is not running"), from the problem+json body if there is one."""
        title, detail, _ = self._problem(response)
        status = response.status_code
        label = f"{status} {title or response.reason_phrase or _reason_phrase(status)}".strip()
        if detail and detail != title:
            return label, detail
        if not title and response.content.strip():
            return label, "the answer was not a JSON error, perhaps a proxy's page"
        return label, ""

    def _problem(self, response: httpx.Response) -> tuple[str, str, list[str]]:
        """title, detail and errors of an RFC 9457 body; empty when the body is anything else."""
        try:
            data = decode_json(response.content)
        except MalformedBody:
            return "", "", []
        if not isinstance(data, dict):
            return "", "", []
        title = self._clean(data.get("title"))
        detail = self._clean(data.get("detail"))
        raw_errors = data.get("errors")
        errors = []
        if isinstance(raw_errors, list):
            errors = [self._clean(error) for error in raw_errors[:10] if isinstance(error, str)]
        return title, detail, [error for error in errors if error]

    def _clean(self, text: Any) -> str:
        """Server text made safe to show: short, one line, and never echoing the key."""
        if not isinstance(text, str):
            return ""
        if self._api_key:
            text = text.replace(self._api_key, "[API key]")
        return " ".join(text.split())[:300]


def describe_transport_error(exc: BaseException) -> str:
    """What went wrong on the network, in plain words."""
    if isinstance(exc, httpx.ConnectTimeout):
        return "timed out while connecting"
    if isinstance(exc, httpx.PoolTimeout):
        return "timed out waiting for a free connection"
    if isinstance(exc, httpx.ReadTimeout):
        return "timed out waiting for the answer"
    if isinstance(exc, httpx.WriteTimeout):
        return "timed out sending the request"
    text = str(exc).lower()
    if isinstance(exc, httpx.ProxyError):
        return "the proxy refused the connection"
    if isinstance(exc, httpx.ConnectError):
        if "refused" in text:
            return "connection refused"
        name_errors = ("name or service", "nodename", "name resolution", "getaddrinfo", "errno -")
        if any(marker in text for marker in name_errors):
            return "name not found"
        if "certificate" in text:
            return "its TLS certificate could not be verified"
        if "ssl" in text or "tls" in text:
            return "the secure (TLS) connection failed"
        if "unreachable" in text:
            return "network unreachable"
        return "could not connect"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the connection closed before the answer was complete"
    if isinstance(exc, httpx.ReadError):
        return "the connection broke while reading the answer"
    if isinstance(exc, httpx.WriteError):
        return "the connection broke while sending the request"
    if isinstance(exc, httpx.DecodingError):
        return "an answer that could not be decompressed"
    return type(exc).__name__


def _normalise_base_url(base_url: str) -> str:
    """`https://api.runpod.io`, also accepting a trailing slash or `/v2` (as Runpod's docs
    write it), and keeping any other path prefix (a simulator mounted under a path)."""
    try:
        url = httpx.URL((base_url or "").strip())
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host or url.userinfo:
        raise ValueError(f"{base_url!r} is not a base URL like https://api.runpod.io")
    path = url.path.rstrip("/")
    path = path.removesuffix("/v2")
    return str(url.copy_with(path=path or "/", query=None, fragment=None)).rstrip("/")


def _is_local(base_url: str) -> bool:
    host = httpx.URL(base_url).host
    return host in ("localhost", "127.0.0.1", "::1", "testserver") or "." not in host


def _api_key_problem(api_key: str) -> str | None:
    if not api_key:
        return "No Runpod API key is set."
    if not _API_KEY_SHAPE.fullmatch(api_key):
        return (
            "The Runpod API key contains spaces, line breaks or other characters an API key"
            " cannot have: check it was copied whole and nothing else."
        )
    return None


def _backoff_s(failed_attempts: int) -> float:
    """Exponential, with half of each step jittered so many syncs do not retry in step."""
    step = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (failed_attempts - 1))
    return step / 2 + random.uniform(0, step / 2)  # noqa: S311 - jitter, not a secret


def _retry_after_s(response: httpx.Response) -> float | None:
    """Retry-After as seconds from now: delay-seconds, or an HTTP date (measured against the
    response's own Date header when it has one, so clock skew does not matter)."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = dt.datetime.now(dt.UTC)
    server_date = response.headers.get("Date")
    if server_date:
        with contextlib.suppress(TypeError, ValueError):
            now = email.utils.parsedate_to_datetime(server_date)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.UTC)
    return max(0.0, (when - now).total_seconds())


def _status_label(status: int | None) -> str:
    return "" if status is None else f"{status} {_reason_phrase(status)}".strip()


def _reason_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
