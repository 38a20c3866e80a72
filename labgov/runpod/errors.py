"""Errors from talking to Runpod, each with a message a person can act on."""


class RunpodError(Exception):
    """Runpod answered with an error, or could not be reached.

    `status` is the HTTP status (None when there was no answer); `title`, `detail` and
    `errors` come from the problem+json body when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        title: str = "",
        detail: str = "",
        errors: list[str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors or []

    @property
    def transient(self) -> bool:
        """Worth trying again later (a sync retry, a provisioning retry)."""
        return False


class RunpodAuthError(RunpodError):
    """401 or 403: the key is wrong, revoked, or lacks the permission."""


class RunpodNotFound(RunpodError):
    """404."""


class RunpodConflict(RunpodError):
    """409: the action is not valid for the resource's current status."""


class RunpodInsufficientBalance(RunpodError):
    """402: the account's balance does not cover the request."""


class RunpodRequestInvalid(RunpodError):
    """400 or 422: Runpod refused the request as malformed."""


class RunpodUnavailable(RunpodError):
    """No usable answer after the retries: network error, timeout, 5xx or 429.

    `retry_after_s` is how long Runpod asked us to wait (a 429's Retry-After), when it said.
    """

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after_s = retry_after_s

    @property
    def transient(self) -> bool:
        return True


class RunpodOutcomeUnknown(RunpodUnavailable):
    """A request that must not be repeated blindly (creating a pod) got no clear answer.

    Runpod may or may not have acted on it, so it is not `transient`: look for the resource
    before trying again, or a second pod may be created and billed.
    """

    @property
    def transient(self) -> bool:
        return False


class RunpodBadResponse(RunpodError):
    """An answer that is not what the API contract describes (truncated, malformed)."""

    @property
    def transient(self) -> bool:
        return True
