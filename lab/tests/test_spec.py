"""The one reader of experiment files: every file under lab/experiments/ validates, and a
misspelt key or section in a file of each kind is refused by name before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shortfirst_lab.__main__ import main
from shortfirst_lab.spec.reader import KINDS, read_spec
from shortfirst_lab.spec.schema import SpecError

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
FILES = sorted(EXPERIMENTS.glob("*.toml"))

#: A file of each kind, a line of it, that line misspelt, and the dotted key the error names.
MISSPELT = [
    ("demo.toml", "duration_s = 45", "duraton_s = 45", "run.duraton_s"),
    ("demo.toml", "[calibration]", "[calibraton]", "calibraton"),
    ("gatekeeper-tpcw-short.toml", "browsers = [50, 150, 400]", "browsrs = [50, 150, 400]", "load.browsrs"),
    ("gatekeeper-tpcw-short.toml", "[gatekeeper]", "[gatekeper]", "gatekeper"),
    ("gatekeeper-datasette.toml", "peak_repeats = 2", "peak_repeat = 2", "run.peak_repeat"),
    ("gatekeeper-datasette.toml", "refine_steps = 1", "refine_step = 1", "calibrate.refine_step"),
    (
        "gatekeeper-json-server.toml",
        'estimate_basis = "serial"',
        'estimate_bassis = "serial"',
        "json-server.estimate_bassis",
    ),
    ("gatekeeper-datasette.toml", "[datasette]", "[datasete]", "datasete"),
    ("gatekeeper-datasette.toml", 'backend = "datasette"', 'backend = "datasete"', "backend"),
    ("gatekeeper-tpcw-short.toml", 'backend = "bookstore"', 'backend = "synthetic"', "bookstore"),
    ("gatekeeper-synthetic.toml", "slots = 32", "slot = 32", "synthetic.slot"),
    ("gatekeeper-synthetic.toml", "[overhead]", "[overhed]", "overhed"),
    ("farm.toml", "hosts = 2", "host = 2", "farm.host"),
    ("farm.toml", 'haproxy = "haproxy"', 'haproxi = "haproxy"', "farm.haproxi"),
    ("farm.toml", "[farm]", "[frm]", "frm"),
    ("farm.toml", "warmup_s = 30", "warmup = 30", "run.warmup"),
    ("pg-gatekeeper.toml", "pool_size = 2", "pool_sise = 2", "pg.pool_sise"),
    ("pg-gatekeeper.toml", "cheap_room = 0.5", "cheap_rom = 0.5", "overload.cheap_rom"),
    ("pg-gatekeeper.toml", "distinct_texts = 1000", "distinct_text = 1000", "overhead.distinct_text"),
    ("pg-gatekeeper.toml", "[overload]", "[overlaod]", "overlaod"),
    ("pg-gatekeeper.toml", "[pg]", "[pgg]", "pgg"),
]


def test_every_kind_has_a_file():
    kinds = {read_spec(p).kind for p in FILES}
    assert kinds == set(KINDS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_experiment_file_validates(path):
    spec = read_spec(path)
    assert spec.kind in KINDS and spec.path == path


def test_the_cli_validates_them_all(capsys):
    assert main(["validate", *map(str, FILES)]) == 0
    out = capsys.readouterr().out
    assert out.count(": ok — ") == len(FILES)


@pytest.mark.parametrize(("name", "line", "typo", "key"), MISSPELT, ids=[m[3] for m in MISSPELT])
def test_a_misspelt_key_is_refused_by_name(tmp_path, name, line, typo, key):
    text = (EXPERIMENTS / name).read_text()
    assert text.count(line) == 1
    bad = tmp_path / name
    bad.write_text(text.replace(line, typo))
    with pytest.raises(SpecError) as e:
        read_spec(bad)
    assert e.value.path == str(bad) and e.value.key == key
    assert str(e.value).startswith(f"{bad}: {key}: expected ")


def test_the_cli_refuses_a_misspelt_key_with_one_line(tmp_path):
    bad = tmp_path / "foreign.toml"
    bad.write_text((EXPERIMENTS / "gatekeeper-datasette.toml").read_text().replace("think_s =", "thinks_s ="))
    proc = subprocess.run(
        [sys.executable, "-m", "shortfirst_lab", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}: run.thinks_s: expected one of the known keys [")
    assert "(unknown key)" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_overrides_apply_to_every_kind_before_validation(tmp_path):
    spec = read_spec(EXPERIMENTS / "gatekeeper-datasette.toml", ["run.duration_s=40"])
    assert spec.value.duration_s == 40.0
    spec = read_spec(EXPERIMENTS / "gatekeeper-tpcw-short.toml", ["load.browsers=[5]"])
    assert spec.value["load"]["browsers"] == [5]
    with pytest.raises(SpecError, match=r"load\.browser: expected one of the known keys"):
        read_spec(EXPERIMENTS / "gatekeeper-tpcw-short.toml", ["load.browser=[5]"])


def test_a_file_of_no_kind_is_refused(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("[nothing]\na = 1\n")
    with pytest.raises(
        SpecError, match=r"x\.toml: expected an experiment file: one of the sections \[experiment\]"
    ):
        read_spec(p)
    with pytest.raises(SpecError, match=r"expected a static serving experiment file"):
        read_spec(EXPERIMENTS / "gatekeeper-datasette.toml", kind="static")


def test_the_synthetic_file_holds_the_bench_s_settings_and_flags_override_it():
    """`make bench-gatekeeper-synthetic` passes the file: it must give the bench exactly the
    settings it ran with before it had one (its flags' defaults), and a flag still wins."""
    from shortfirst_lab.runners.gatekeeper.synthetic.cli import parse

    path = str(EXPERIMENTS / "gatekeeper-synthetic.toml")
    defaults, from_file = vars(parse([])[1]), vars(parse([path])[1])
    assert from_file.pop("experiment") == path and defaults.pop("experiment") is None
    assert from_file == defaults
    a = parse([path, "--duration", "7", "--configs", "fifo"])[1]
    assert (a.duration, a.configs, a.closed_factors) == (7.0, "fifo", "0.5,1,2,3")


def test_optional_keys_take_their_defaults(tmp_path):
    """A key the schema marks optional may be left out (the foreign bench's seed is 1)."""
    p = tmp_path / "foreign.toml"
    p.write_text((EXPERIMENTS / "gatekeeper-datasette.toml").read_text().replace("seed = 1\n", "", 1))
    assert read_spec(p).value.seed == 1


@pytest.mark.parametrize(
    "name", ["gatekeeper-synthetic.toml", "gatekeeper-tpcw.toml", "gatekeeper-json-server.toml"]
)
def test_a_gatekeeper_file_names_its_backend(tmp_path, name):
    """The gatekeeper kind's files say which backend they are for; without `backend` (or for
    another backend than the reader asks for) they are refused naming the key."""
    spec = read_spec(EXPERIMENTS / name)
    assert (
        spec.kind == "gatekeeper"
        and name == f"gatekeeper-{dict(bookstore='tpcw').get(spec.backend, spec.backend)}.toml"
    )
    bad = tmp_path / name
    bad.write_text(
        "\n".join(x for x in (EXPERIMENTS / name).read_text().splitlines() if not x.startswith("backend ="))
    )
    with pytest.raises(SpecError) as e:
        read_spec(bad)
    assert e.value.key == "backend" and e.value.got is None
    other = "datasette" if spec.backend != "datasette" else "synthetic"
    with pytest.raises(SpecError, match=rf"backend: expected one of \['{other}'\], got '{spec.backend}'"):
        read_spec(EXPERIMENTS / name, kind="gatekeeper", backend=other)
