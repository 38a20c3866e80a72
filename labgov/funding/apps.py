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
        from django.db.models.signals import post_migrate

        from labgov.funding.totals import ensure_sqlite_trigger
        from labgov.notifications.kinds import register

        def trigger(sender, using="default", **kwargs):
            ensure_sqlite_trigger(using)

        # SQLite drops a table's triggers when a migration rebuilds it.
        post_migrate.connect(trigger, dispatch_uid="labgov-ledger-totals-trigger")

        for kind, (label, severity) in NOTIFICATION_KINDS.items():
            register(kind, label, severity)
