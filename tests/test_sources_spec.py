"""``--data`` values that name live sources: the forms accepted, their default names, every refusal of a
password (never echoed), names that are not identifiers, and a third party's kind claiming its own scheme
through the ``kernel_agent.sources`` entry points."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_agent import plugins
from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError, SourceError
from kernel_agent.sources import SOURCES, SourceSpec, is_source, open_source, parse_source
from kernel_agent.sources.postgresql import POSTGRESQL

SECRET = "s3cret-PW"


@pytest.mark.parametrize(
    ("value", "name", "target"),
    [
        ("postgresql://ann@db.example:5432/shop", "shop", "postgresql://ann@db.example:5432/shop"),
        ("postgres://ann@db/shop", "shop", "postgres://ann@db/shop"),
        ("POSTGRESQL://ann@db/shop", "shop", "POSTGRESQL://ann@db/shop"),
        ("postgresql:///?service=warehouse", "warehouse", "postgresql:///?service=warehouse"),
        ("postgresql://ann@/shop?host=/run/postgresql", "shop", "postgresql://ann@/shop?host=/run/postgresql"),
        (
            "postgresql://ann@db?dbname=sales&sslmode=require",
            "sales",
            "postgresql://ann@db?dbname=sales&sslmode=require",
        ),
        ("postgresql://ann@db", "ann", "postgresql://ann@db"),  # libpq's default database is the user's
        ("postgresql://db", "postgresql", "postgresql://db"),
        ("postgresql://ann@db/my-shop.v2", "my_shop_v2", "postgresql://ann@db/my-shop.v2"),
        ("postgresql://ann@db/2026", "_2026", "postgresql://ann@db/2026"),
        (
            "postgresql://ann@db/shop?passfile=/home/ann/pgpass",
            "shop",
            "postgresql://ann@db/shop?passfile=/home/ann/pgpass",
        ),
        ("shop=postgresql://ann@db/x", "shop", "postgresql://ann@db/x"),
        ("_Shop2=postgresql:///?service=w", "_Shop2", "postgresql:///?service=w"),
        ("both=postgresql://h1:5432,h2:5433/shop", "both", "postgresql://h1:5432,h2:5433/shop"),
    ],
)
def test_a_source_uri_is_read_with_its_name(value: str, name: str, target: str) -> None:
    assert is_source(value)
    assert parse_source(value) == SourceSpec(name, "postgresql", target)


@pytest.mark.parametrize(
    "value",
    [
        f"postgresql://ann:{SECRET}@db/shop",
        "postgresql://ann:@db/shop",
        f"shop=postgresql://ann:{SECRET}@db/shop",
        f"postgresql://ann@db/shop?password={SECRET}",
        f"postgresql://ann@db/shop?sslmode=require&PASSWORD={SECRET}",
        f"postgresql://ann@db/shop?pass%77ord={SECRET}",  # libpq decodes a parameter's name too
        f"postgresql://ann@db/?dbname=postgresql://ann:{SECRET}@db/shop",
        f"postgresql://ann@db/?dbname=host%3Ddb%20password%3D{SECRET}",
        f"host=db dbname=shop password={SECRET}",
        f"shop=host=db password='{SECRET}'",
    ],
)
def test_a_password_anywhere_in_the_value_is_refused_saying_where_it_goes(value: str) -> None:
    assert is_source(value)
    with pytest.raises(SourceError) as refused:
        parse_source(value)
    message = str(refused.value)
    assert SECRET not in message and SECRET not in repr(refused.value)
    assert isinstance(refused.value, ConfigError)  # the user's to fix: exit 2
    if "dbname" not in value:
        assert "~/.pgpass" in message and "PGPASSFILE" in message and "pg_service.conf" in message


def test_libpq_keywords_without_a_password_are_refused_for_a_uri() -> None:
    with pytest.raises(SourceError, match=r"as a URI, not as libpq keywords: postgresql://USER@HOST"):
        parse_source("host=db dbname=shop user=ann")


@pytest.mark.parametrize("name", ["9shop", "my-shop", "", "sh op", "naïve"])
def test_a_name_must_be_an_identifier(name: str) -> None:
    with pytest.raises(SourceError, match="must be an identifier .*letters, digits and _") as refused:
        parse_source(f"{name}=postgresql://ann@db/shop")
    assert refused.value.source == name


@pytest.mark.parametrize(
    "value", ["sales.csv", "/data/shop.sqlite", "./host=db", "C:/data/x.csv", "notes", "http:/x", "file.duckdb"]
)
def test_a_file_is_not_a_source(value: str) -> None:
    assert not is_source(value)


def test_a_scheme_no_kind_claims_is_a_file_and_parse_says_which_schemes_are_known() -> None:
    assert not is_source("mysql://ann@db/shop")
    with pytest.raises(SourceError, match=r"no installed data source kind reads mysql:// URIs \(installed: post"):
        parse_source("mysql://ann@db/shop")


def test_a_spec_shows_its_name_kind_and_target_only() -> None:
    spec = parse_source("shop=postgresql://ann@db/shop")
    assert repr(spec) == "SourceSpec(name='shop', kind='postgresql', target='postgresql://ann@db/shop')"
    assert str(spec) == "shop (postgresql: postgresql://ann@db/shop)"
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]


def test_ours_is_registered_as_a_third_partys_is() -> None:
    assert SOURCES.names()[0] == "postgresql"
    entry = SOURCES.entry("postgresql")
    assert entry.dist is not None and entry.dist.name == "kernel-agent"
    assert SOURCES.make("PostgreSQL") is POSTGRESQL
    assert repr(POSTGRESQL) == "<SourceKind postgresql postgresql/postgres>"


THEIR_MODULE = """
from kernel_agent.errors import SourceError
from kernel_agent.sources.registry import SourceKind

OPENED = []


def check(target):
    if "@" not in target:
        raise SourceError("their kind wants a user")
    return target.rsplit("/", 1)[-1]


def open_it(spec):
    OPENED.append(spec)
    return "their source"


MYSQL = SourceKind("mysql", ("mysql", "mariadb"), check, open_it)
GREEDY = SourceKind("greedy", ("postgresql",), check, open_it)  # ours come first: it never wins
BROKEN = "not a kind"
"""

ENTRY_POINTS = """
[kernel_agent.sources]
mysql = their_sources:MYSQL
greedy = their_sources:GREEDY
broken = their_sources:BROKEN
"""


@pytest.fixture
def their_kinds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A third party's installed package with two source kinds (and a broken entry), read afresh."""
    site = tmp_path / "site"
    info = site / "their_sources-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "their_sources.py").write_text(THEIR_MODULE)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: their-sources\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "their_sources", raising=False)
    plugins.forget()
    yield site
    sys.modules.pop("their_sources", None)
    plugins.forget()


def test_a_third_party_kind_reads_and_opens_its_uris(their_kinds: Path) -> None:
    assert SOURCES.names() == ("postgresql", "broken", "greedy", "mysql")
    spec = parse_source("MariaDB://ann@db/sales")
    assert spec == SourceSpec("sales", "mysql", "MariaDB://ann@db/sales")
    assert is_source("mysql://ann@db/sales")
    with pytest.raises(SourceError, match="their kind wants a user"):
        parse_source("mysql://db/sales")
    assert parse_source("postgresql://ann@db/shop").kind == "postgresql"  # ours first
    assert open_source(spec) == "their source"  # type: ignore[comparison-overlap]

    import their_sources  # type: ignore[import-not-found]  # the package this test installed

    assert [spec] == their_sources.OPENED


def test_a_broken_kind_is_passed_over_unless_no_other_claims_the_scheme(their_kinds: Path) -> None:
    broken = r"the data source kind 'broken' \(their_sources:BROKEN\) is a str, not a SourceKind"
    with pytest.raises(ConfigError, match=broken):
        SOURCES.make("broken")
    assert is_source("mysql://ann@db/sales") and parse_source("postgresql://ann@db/shop").kind == "postgresql"
    with pytest.raises(ConfigError, match=broken):  # an unclaimed scheme may be the broken kind's
        is_source("oracle://ann@db/sales")


def test_a_spec_of_a_kind_not_installed_is_refused_by_name() -> None:
    with pytest.raises(SourceError, match=r"data source 'sales' is of kind 'mysql', which is not installed"):
        open_source(SourceSpec("sales", "mysql", "mysql://ann@db/sales"))


def test_the_plugins_command_lists_the_sources_group(their_kinds: Path) -> None:
    said = CliRunner().invoke(cli, ["plugins"], catch_exceptions=False)
    assert said.exit_code == 0, said.output
    lines = [line.split() for line in said.output.splitlines()]
    assert ["kernel_agent.sources"] in lines
    assert ["postgresql", "kernel_agent.sources.postgresql:POSTGRESQL", "kernel-agent"] in [line[:3] for line in lines]
    assert ["mysql", "their_sources:MYSQL", "their-sources", "0.1"] in lines
