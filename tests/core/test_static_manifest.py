"""Production static files: `collectstatic` with the manifest storage production uses (DEBUG=0)
must succeed for every file, and pages must then answer with the hashed names. The web unit's
collectstatic runs once for the files it reads (tests/fixtures_static.py keeps its output
under their digest, and fails the run when it fails)."""

import re
from pathlib import Path

from django.urls import reverse

ROOT = Path(__file__).resolve().parents[2]
SOURCE_MAP = re.compile(rb"[#@] sourceMappingURL=(\S+)")


def test_every_vendored_source_map_reference_is_vendored():
    """ManifestStaticFilesStorage rewrites `sourceMappingURL` comments and fails on a map that
    is not there (MissingFileError), so either the map is vendored or the comment is gone."""
    for path in (ROOT / "static").rglob("*"):
        if path.suffix in (".js", ".css"):
            for name in SOURCE_MAP.findall(path.read_bytes()):
                assert (path.parent / name.decode()).exists(), f"{path} names missing {name}"


def test_collectstatic_with_the_production_storage_then_pages_answer(
    db, client, settings, production_static
):
    settings.STATIC_ROOT = production_static
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "labgov.core.static_storage.StaticFilesStorage"},
    }
    manifest = (production_static / "staticfiles.json").read_text()
    # Compressed for browsers, except source maps (only developer tools fetch them).
    assert list(production_static.rglob("*.js.br")) and list(production_static.rglob("*.css.gz"))
    assert list(production_static.rglob("*.map"))
    assert not list(production_static.rglob("*.map.br")) + list(production_static.rglob("*.map.gz"))
    assert "vendor/chart-4.6.1.umd.min.js" in manifest
    # The apps' files pages load are there; those no page loads are not (staticfinders.py).
    for served in ("admin/css/base.css", "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css"):
        assert f'"{served}"' in manifest, served
    for unserved in ("rest_framework/", "django_htmx/", "drf_spectacular_sidecar/redoc/"):
        assert f'"{unserved}' not in manifest, unserved
        assert not (production_static / unserved).exists(), unserved
    assert client.get(reverse("healthz")).status_code == 200
    login = client.get(reverse("login"))
    assert login.status_code == 200
    # The page links the hashed name from the manifest, not the source name.
    assert re.search(rb'href="/static/css/labgov\.[0-9a-f]{12}\.css"', login.content)


def test_the_kept_collected_files_are_collected_again_when_a_static_file_changes(
    settings, tmp_path
):
    """The run keeps collectstatic's output under a digest of what it reads
    (tests/fixtures_static.py): a changed or an added static file gives another digest."""
    from tests.fixtures_static import static_digest

    (tmp_path / "extra.css").write_text("a {}")
    settings.STATICFILES_DIRS = [*settings.STATICFILES_DIRS, tmp_path]
    before = static_digest()
    assert static_digest() == before
    (tmp_path / "extra.css").write_text("b {}")
    changed = static_digest()
    (tmp_path / "other.css").write_text("")
    added = static_digest()
    assert len({before, changed, added}) == 3


def test_the_storage_keeps_each_url_until_collectstatic_makes_the_manifest_again(
    settings, production_static
):
    """Production's storage works out a file's URL once (labgov/core/static_storage.py): the
    same URL after the manifest it came from changed in memory, a new one once collectstatic's
    post_process has run, and DEBUG's unhashed one under DEBUG."""
    import pytest

    from labgov.core.static_storage import StaticFilesStorage

    settings.DEBUG = False
    storage = StaticFilesStorage(location=production_static)
    url = storage.url("css/labgov.css")
    assert re.fullmatch(r"/static/css/labgov\.[0-9a-f]{12}\.css", url)
    storage.hashed_files["css/labgov.css"] = "css/labgov.0123456789ab.css"
    assert storage.url("css/labgov.css") == url  # kept, not looked up again
    settings.DEBUG = True
    assert storage.url("css/labgov.css") == "/static/css/labgov.css"
    settings.DEBUG = False
    # collectstatic makes the manifest again (here from no files at all): what was kept goes.
    list(storage.post_process({}, dry_run=True))
    with pytest.raises(ValueError, match="Missing staticfiles manifest entry"):
        storage.url("css/labgov.css")
    # A name no template holds is not kept past the bound, and still answers.
    storage.hashed_files = {f"f{i}.css": f"f{i}.0123456789ab.css" for i in range(1100)}
    urls = [storage.url(f"f{i}.css") for i in range(1100)]
    assert urls[-1] == "/static/f1099.0123456789ab.css" and len(storage._urls) == 1000
