from django.apps import AppConfig

# Kinds of notification this app sends (proposals.py): finance and institution admins hear of a
# lab admin's funding proposal; the proposer hears of the decision.
NOTIFICATION_KINDS = {
    "funding.proposal": ("A lab admin proposed funding", "warning"),
    "funding.proposal_decided": ("A funding proposal was decided", "info"),
}


class FundingConfig(AppConfig):
    name = "labgov.funding"
    label = "funding"

    def ready(self):
        from labgov.notifications.kinds import register

        for kind, (label, severity) in NOTIFICATION_KINDS.items():
            register(kind, label, severity)
