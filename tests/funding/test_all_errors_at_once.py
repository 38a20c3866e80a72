"""A form says everything wrong with what was sent at once, not one error per try."""

from django.urls import reverse


def test_funding_source_form_reports_dates_amount_and_rate_together(world, client_for):
    response = client_for(world.finance).post(
        reverse("funding:create"),
        {
            "lab": world.lab.pk,
            "kind": "grant",
            "name": "Twice wrong",
            "start_date": "2026-12-31",
            "end_date": "2026-01-01",
            "amount_usd": "-5",
            "indirect_cost_rate_percent": "250",
            "status": "active",
        },
    )
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert set(errors) >= {"end_date", "amount_usd", "indirect_cost_rate_percent"}
    text = response.content.decode()
    assert "The end date is before the start date." in text
    assert "The amount cannot be negative." in text
    assert "between 0 and 200" in text


def test_allocation_form_reports_cap_and_dates_together(world, client_for):
    response = client_for(world.lab_admin).post(
        reverse("funding:allocation_new", args=[world.funding_source.pk]),
        {
            "user": world.member.pk,
            "cap_usd": "-1",
            "start_date": "2026-12-31",
            "end_date": "2026-01-01",
        },
    )
    assert response.status_code == 200
    assert set(response.context["form"].errors) >= {"cap_usd", "end_date"}
