"""Print a fresh API token for a demo person (scripts/run-demo runs it after seed_demo), so
the README's curl example works against `make run`. The demo's earlier token is revoked."""

from django.core.management.base import BaseCommand, CommandError

from labgov.accounts.models import User
from labgov.api.models import ApiToken
from labgov.api.services import token_create, token_revoke

NAME = "demo (printed by make run)"


class Command(BaseCommand):
    help = "Make (and print) a read + write API token for a demo person, revoking the last."

    def add_arguments(self, parser):
        parser.add_argument("--user", default="pia", help="username (default: pia, lab admin)")
        parser.add_argument("--days", type=int, default=7)
        parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="labgov's address")

    def handle(self, *args, user: str, days: int, base_url: str, **options):
        person = User.objects.filter(username=user).first()
        if person is None:
            raise CommandError(f"No user {user!r}: seed the demo first (manage.py seed_demo).")
        for old in ApiToken.objects.filter(user=person, name=NAME, revoked_at__isnull=True):
            token_revoke(actor=person, token=old)
        _token, text = token_create(actor=person, name=NAME, scope="write", days=days)
        self.stdout.write(f"\nAPI token for {user} (read + write, {days} days): {text}")
        self.stdout.write(
            f'  curl -H "Authorization: Bearer {text}" {base_url.rstrip("/")}/api/v1/allocations/'
        )
