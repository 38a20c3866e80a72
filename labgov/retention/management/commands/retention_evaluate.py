from django.core.management.base import BaseCommand

from labgov.retention.evaluation import retention_evaluate_all


class Command(BaseCommand):
    help = "Evaluate retention now for every institution (what the daily schedule runs)."

    def handle(self, *args, **options):
        counts = retention_evaluate_all()
        self.stdout.write(", ".join(f"{name} {value}" for name, value in counts.items()) or "done")
