import datetime as dt
import unicodedata
from decimal import Decimal

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models import Q
from django.utils import timezone

DEFAULT_AUTO_APPROVE_CEILING_USD = Decimal("1000.00")


def today_utc() -> dt.date:
    return timezone.now().date()


class User(AbstractUser):
    # The institution whose identity provider first signed this person in: while they hold
    # no role anywhere, only that institution's admins may add them (accounts made by hand
    # have none, and any institution that has them in hand may add them).
    home_institution = models.ForeignKey(
        "accounts.Institution",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )

    def __str__(self) -> str:
        return self.get_full_name() or self.username

    def clean(self):
        """NFKC, and no look-alike of another person's username (every form and the admin
        call this)."""
        from django.core.exceptions import ValidationError

        from labgov.accounts.usernames import look_alike_of

        super().clean()
        self.username = unicodedata.normalize("NFKC", self.username or "")
        other = look_alike_of(self.username, exclude_pk=self.pk)
        if other is not None:
            raise ValidationError(
                {"username": f"This username cannot be told apart from {other!r}; choose another."}
            )


class Institution(models.Model):
    name = models.CharField(max_length=200, unique=True)
    slug = models.SlugField(max_length=60, unique=True)
    # No lab's policy may approve requests on submission at or above this (the institution
    # admin's ceiling over every lab admin's auto-approval amount); checked again at approval.
    auto_approve_ceiling_usd = models.DecimalField(
        "auto-approval ceiling (USD)",
        max_digits=14,
        decimal_places=2,
        default=DEFAULT_AUTO_APPROVE_CEILING_USD,
    )
    # Billing periods are calendar months here (an IANA name, set through
    # institution_time_zone_set); their edges fall on whole UTC hours (labgov.usage.periods).
    time_zone = models.CharField(max_length=60, default="UTC")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(auto_approve_ceiling_usd__gte=0),
                name="institution_auto_approve_ceiling_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Lab(models.Model):
    class Kind(models.TextChoices):
        RESEARCH_GROUP = "research_group", "Research group"
        COURSE = "course", "Course"

    institution = models.ForeignKey(
        Institution, on_delete=models.PROTECT, related_name="labs", db_index=False
    )
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=60)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.RESEARCH_GROUP)
    department = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["institution", "slug"], name="lab_unique_slug"),
            models.UniqueConstraint(fields=["institution", "name"], name="lab_unique_name"),
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    INSTITUTION_ADMIN = "institution_admin", "Institution admin"
    FINANCE = "finance", "Finance"
    LAB_ADMIN = "lab_admin", "Lab admin"
    MEMBER = "member", "Member"


INSTITUTION_ROLES = (Role.INSTITUTION_ADMIN, Role.FINANCE)
LAB_ROLES = (Role.LAB_ADMIN, Role.MEMBER)


class MembershipQuerySet(models.QuerySet):
    def active(self, on: dt.date | None = None):
        """Memberships granting access on the given day (today by default).

        end_date is the last day of access, so a membership ending today still grants it.
        """
        day = on or timezone.now().date()
        return self.filter(Q(end_date__isnull=True) | Q(end_date__gte=day), start_date__lte=day)


class Membership(models.Model):
    """A person's role in an institution (admin, finance) or in one lab (lab admin, member)."""

    user = models.ForeignKey(
        User, on_delete=models.PROTECT, related_name="memberships", db_index=False
    )
    institution = models.ForeignKey(
        Institution, on_delete=models.PROTECT, related_name="memberships"
    )
    lab = models.ForeignKey(
        Lab, on_delete=models.PROTECT, related_name="memberships", null=True, blank=True
    )
    role = models.CharField(max_length=20, choices=Role.choices)
    start_date = models.DateField(default=today_utc)
    end_date = models.DateField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(role__in=INSTITUTION_ROLES, lab__isnull=True)
                    | Q(role__in=LAB_ROLES, lab__isnull=False)
                ),
                name="membership_role_matches_scope",
            ),
            models.CheckConstraint(
                condition=Q(end_date__isnull=True) | Q(end_date__gte=models.F("start_date")),
                name="membership_end_after_start",
            ),
        ]
        indexes = [models.Index(fields=["user", "role"])]

    def __str__(self) -> str:
        where = self.lab or self.institution
        return f"{self.user} – {self.get_role_display()} of {where}"


class ExternalIdentity(models.Model):
    """Who a person is at the institution's identity provider (OpenID Connect).

    A person is found by (issuer, subject), the provider's stable id for them, never by email:
    an email can change hands, be reused or be edited at the provider. Memberships given because
    of a provider group are kept in granted_memberships, so that losing the group ends exactly
    those and never a role an admin gave by hand.
    """

    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="external_identities")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)
    granted_memberships = models.ManyToManyField(Membership, blank=True, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="external_identity_unique_subject"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} at {self.issuer}"
