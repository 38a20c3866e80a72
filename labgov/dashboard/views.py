from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from labgov.dashboard.selectors import home_for_user


@login_required
@require_GET
def home(request):
    return render(request, "dashboard/home.html", {"data": home_for_user(request.user)})
