"""Error reports that hide secrets in development too."""

from django.views.debug import SafeExceptionReporterFilter


class SecretsHiddenReporterFilter(SafeExceptionReporterFilter):
    """Django hides `sensitive_variables` and `sensitive_post_parameters` only when DEBUG is
    off; a development or staging server with DEBUG on may hold real Runpod keys too, so its
    error pages hide them as well (everything else still shows)."""

    def is_active(self, request):
        return True
