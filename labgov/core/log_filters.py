"""Logging filters named in settings.LOGGING."""

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """A refused request (403) is a decision, not a fault: Django logs it as a warning with
    the PermissionDenied's traceback, which buries real errors. Keep the line, drop the
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
