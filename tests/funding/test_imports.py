from decimal import Decimal

from labgov.audit.models import AuditEvent
from labgov.funding.imports import grants_import_csv
from labgov.funding.models import FundingSource

HEADER = (
    "lab,name,award_number,sponsor,cost_center,start_date,end_date,amount_usd,"
    "indirect_cost_rate_percent\n"
)
GOOD = HEADER + (
    "vision,Perception,NSF-1,NSF,CC-1,2026-01-01,2027-12-31,50000.00,55\n"
    'NLP,Summaries,NIH-2,NIH,CC-2,2026-03-01,2028-02-29,"$120,000.50",\n'
)


def _import(world, text, encoding="utf-8"):
    return grants_import_csv(
        actor=world.finance, institution=world.institution, data=text.encode(encoding)
    )


def _new_grants():
    return FundingSource.objects.filter(award_number__in=["NSF-1", "NIH-2"])


def test_good_file_imports_every_row(world):
    result = _import(world, GOOD)
    assert result.ok, result.errors
    assert (result.created, result.updated, result.unchanged) == (2, 0, 0)
    nih = FundingSource.objects.get(award_number="NIH-2")
    assert nih.amount_usd == Decimal("120000.50")
    assert nih.lab == world.other_lab
    assert nih.indirect_cost_rate_percent is None
    assert AuditEvent.objects.filter(action="funding_source.create").count() == 2


def test_importing_twice_does_not_duplicate(world):
    _import(world, GOOD)
    result = _import(world, GOOD)
    assert result.ok
    assert (result.created, result.updated, result.unchanged) == (0, 0, 2)
    assert _new_grants().count() == 2


def test_reimport_with_changes_updates_by_award_number(world):
    _import(world, GOOD)
    result = _import(world, GOOD.replace("50000.00", "55000.00"))
    assert (result.created, result.updated, result.unchanged) == (0, 1, 1)
    assert FundingSource.objects.get(award_number="NSF-1").amount_usd == Decimal("55000.00")
    assert AuditEvent.objects.filter(action="funding_source.update").count() == 1


def test_any_bad_row_imports_nothing_and_names_every_bad_line(world):
    text = HEADER + (
        "vision,Fine,OK-1,NSF,CC,2026-01-01,2026-12-31,100,\n"  # line 2: fine
        "vision,Backwards,BAD-1,NSF,CC,2026-12-31,2026-01-01,100,\n"  # line 3
        "vision,Negative,BAD-2,NSF,CC,2026-01-01,2026-12-31,-5,\n"  # line 4
        "vision,Letters,BAD-3,NSF,CC,2026-01-01,2026-12-31,lots,\n"  # line 5
        "nowhere,No lab,BAD-4,NSF,CC,2026-01-01,2026-12-31,100,\n"  # line 6
        "vision,Bad date,BAD-5,NSF,CC,2026-13-01,2026-12-31,100,\n"  # line 7
        "vision,,BAD-6,NSF,CC,2026-01-01,2026-12-31,100,\n"  # line 8
        "vision,Twice,OK-1,NSF,CC,2026-01-01,2026-12-31,100,\n"  # line 9
    )
    result = _import(world, text)
    assert not result.ok
    lines = {e.line: e.message for e in result.errors}
    assert sorted(lines) == [3, 4, 5, 6, 7, 8, 9]
    assert "before the start date" in lines[3]
    assert "negative" in lines[4]
    assert "not a number" in lines[5]
    assert "no lab 'nowhere'" in lines[6]
    assert "not a date" in lines[7]
    assert "name is empty" in lines[8]
    assert "also on line 2" in lines[9]
    assert not FundingSource.objects.filter(award_number="OK-1").exists()
    assert not AuditEvent.objects.filter(action="funding_source.create").exists()


def test_row_failing_a_rule_against_existing_data_rolls_back_the_rest(world):
    # The existing grant has $1,000 allocated: cutting it to $10 is refused on line 3, and the
    # good row on line 2 must not stay imported.
    existing = world.funding_source
    text = HEADER + (
        "vision,Fine,OK-9,NSF,CC,2026-01-01,2026-12-31,100,\n"
        f"vision,{existing.name},{existing.award_number},NSF,CC,{existing.start_date},"
        f"{existing.end_date},10,\n"
    )
    result = _import(world, text)
    assert [(e.line, "already allocated" in e.message) for e in result.errors] == [(3, True)]
    assert not FundingSource.objects.filter(award_number="OK-9").exists()
    existing.refresh_from_db()
    assert existing.amount_usd == Decimal("10000.00")


def test_missing_columns_are_reported(world):
    result = _import(world, "lab,name\nvision,x\n")
    assert not result.ok
    assert result.errors[0].line == 1
    assert "award_number" in result.errors[0].message


def test_unknown_columns_are_reported(world):
    result = _import(world, HEADER.strip() + ",colour\n")
    assert "unknown column(s): colour" in str(result.errors[0])


def test_not_utf8(world):
    result = _import(world, GOOD.replace("Perception", "Perzeption ä"), encoding="utf-16")
    assert "not UTF-8" in str(result.errors[0])


def test_empty_file(world):
    result = _import(world, HEADER)
    assert "no rows" in str(result.errors[0])


def test_extra_cells_are_reported(world):
    result = _import(world, HEADER + "vision,X,A-1,NSF,CC,2026-01-01,2026-12-31,100,,surplus\n")
    assert result.errors[0].line == 2
    assert "more cells" in result.errors[0].message


def test_utf8_bom_and_blank_lines_are_fine(world):
    result = grants_import_csv(
        actor=world.finance,
        institution=world.institution,
        data=("\ufeff" + GOOD + "\n\n").encode(),
    )
    assert result.ok and result.created == 2


def test_labs_of_other_institutions_are_not_found(world):
    from tests.factories import LabFactory

    LabFactory(name="Foreign", slug="foreign")
    result = _import(world, HEADER + "foreign,X,A-1,NSF,CC,2026-01-01,2026-12-31,100,\n")
    assert "no lab 'foreign'" in str(result.errors[0])
