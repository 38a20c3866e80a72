"""What the dashboards read: rollups (DailySpend, MonthlySpend), ledger figures and the
resources running now; never raw billing records. Each page reads in a fixed number of
queries whatever the data size."""

from labgov.dashboard.selectors.funding import funding_dashboard
from labgov.dashboard.selectors.home import home_for_user
from labgov.dashboard.selectors.institution import institution_dashboard
from labgov.dashboard.selectors.lab import lab_dashboard
from labgov.dashboard.selectors.student import my_pods, student_dashboard

__all__ = [
    "my_pods",
    "funding_dashboard",
    "home_for_user",
    "institution_dashboard",
    "lab_dashboard",
    "student_dashboard",
]
