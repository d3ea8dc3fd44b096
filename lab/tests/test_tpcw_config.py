"""The TPC-W sweep's experiment file is checked against a strict schema before anything runs:
unknown sections and keys, wrong types and out-of-range values name the file and the key."""

from pathlib import Path

import pytest

from shortfirst_lab.runners.gatekeeper import tpcw
from shortfirst_lab.spec.schema import SpecError

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

BASE = """\
backend = "bookstore"

[bookstore]
items = 1000
customers = 2000

[load]
think_mean_s = 0.7
think_max_s = 7
duration_s = 30
warmup_s = 10
browsers = [10, 20]

[modes]
list = ["direct", "fifo", "sjf", "sjf-aging:2", "sjf@auto"]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", sorted(p.name for p in EXPERIMENTS.glob("gatekeeper-tpcw*.toml")))
def test_shipped_experiment_files_are_valid(name):
    cfg = tpcw.load_config(EXPERIMENTS / name)
    assert cfg["modes"]["list"]


def test_a_minimal_file_is_valid(tmp_path):
    cfg = tpcw.load_config(write(tmp_path, BASE))
    assert cfg["load"]["browsers"] == [10, 20]


def test_a_typo_in_a_key_is_refused_before_anything_runs(tmp_path):
    p = write(tmp_path, BASE.replace("browsers = [10, 20]", "browsers = [10, 20]\nbrowsrs = [30]"))
    with pytest.raises(tpcw.SweepConfigError) as e:
        tpcw.load_config(p)
    assert str(p) in str(e.value) and "load.browsrs" in str(e.value) and "unknown key" in str(e.value)
    # The sweep refuses it too, before it looks for binaries or creates its output directory.
    out = tmp_path / "out"
    with pytest.raises(tpcw.SweepConfigError, match="load.browsrs"):
        tpcw.sweep(p, out, tpcw.Binaries(tmp_path / "missing", tmp_path / "missing"))
    assert not out.exists()


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        (("[load]", "[lod]"), "lod", "unknown section"),
        (("browsers = [10, 20]", "browsers = 20"), "load.browsers", "a non-empty list"),
        (("browsers = [10, 20]", "browsers = []"), "load.browsers", "a non-empty list"),
        (("browsers = [10, 20]", "browsers = [10, 0]"), "load.browsers[1]", ">= 1"),
        (("browsers = [10, 20]", 'browsers = [10, "20"]'), "load.browsers[1]", "an integer"),
        (("duration_s = 30", 'duration_s = "30"'), "load.duration_s", "a number"),
        (("duration_s = 30", "duration_s = 0"), "load.duration_s", "> 0"),
        (("warmup_s = 10", "warmup_s = 30"), "load.warmup_s", "less than load.duration_s"),
        (("items = 1000", "items = 1000.5"), "bookstore.items", "an integer"),
        (("items = 1000", "items = true"), "bookstore.items", "an integer"),
        (("customers = 2000\n", ""), "bookstore.customers", "required"),
        (("think_mean_s = 0.7\n", ""), "load.think_mean_s", "think (required)"),
        (('"sjf@auto"', '"lifo"'), "modes.list[4]", "sjf-aging:X"),
        (('"sjf@auto"', '"sjf@fast"'), "modes.list[4]", "capacity such as 800ms"),
        (
            ("[modes]", '[gatekeeper]\ncalibrate_with = "guess"\n[modes]'),
            "gatekeeper.calibrate_with",
            "one of",
        ),
        (("[modes]", "[gatekeeper]\ncalibrate_growth = 1\n[modes]"), "gatekeeper.calibrate_growth", "> 1"),
        (("[modes]", "[gatekeeper]\ncalibrate_within = 1.0\n[modes]"), "gatekeeper.calibrate_within", "< 1"),
        (("[modes]", '[gatekeeper]\ncapacity = "lots"\n[modes]'), "gatekeeper.capacity", "calibrate"),
        (("[modes]", "[gatekeeper]\nmax_queue_wait_s = -1\n[modes]"), "gatekeeper.max_queue_wait_s", "> 0"),
        (("[modes]", "[postgres]\nmemory_limit = 900\n[modes]"), "postgres.memory_limit", "unknown key"),
        (("[modes]", "[bookstore]\n"), "bookstore", "valid TOML"),
        (("list = [", "[modes.browsers]\nsjf = [0]\n[x]\nlist = ["), "x", "unknown section"),
    ],
)
def test_bad_values_name_the_file_and_the_key(tmp_path, edit, key, expected):
    old, new = edit
    assert old in BASE
    p = write(tmp_path, BASE.replace(old, new, 1))
    with pytest.raises(SpecError) as e:
        tpcw.load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and expected in msg
    if expected != "valid TOML":
        assert f": {key}: " in msg


@pytest.mark.parametrize(
    ("text", "tier", "flags", "by_fingerprint"),
    [
        ("sjf", "http", {"policy": "sjf"}, False),
        ("sjf-aging:2@auto", "http", {"policy": "sjf-aging:2", "capacity": "auto"}, False),
        ("db:sjf", "db", {"policy": "sjf"}, False),
        ("db-fp:fifo@800ms", "db", {"policy": "fifo", "capacity": "800ms"}, True),
        ("db:count:4", "db", {"policy": "fifo", "capacity": "3600s", "max_in_flight": 4}, False),
        ("count:16", "http", {"policy": "fifo", "capacity": "3600s", "max_in_flight": 16}, False),
    ],
)
def test_modes_name_their_tier_policy_and_bounds(text, tier, flags, by_fingerprint):
    m = tpcw.parse_mode(text)
    assert (m.tier, m.gatekeeper_flags, m.by_fingerprint) == (tier, flags, by_fingerprint)
    assert tpcw.parse_mode("direct").tier == "direct"


@pytest.mark.parametrize("text", ["db:", "db:lifo", "http:sjf", "db:count:0", "count:4@800ms", "db:sjf@soon"])
def test_a_bad_mode_is_refused_naming_the_forms(tmp_path, text):
    p = write(tmp_path, BASE.replace('"sjf@auto"', f'"{text}"'))
    with pytest.raises(SpecError) as e:
        tpcw.load_config(p)
    assert ": modes.list[4]: " in str(e.value) and text in str(e.value)


def test_the_database_tier_s_capacity_is_calibrated_with_browsers_or_given(tmp_path):
    db_modes = BASE.replace('"sjf@auto"', '"db:sjf"')
    with pytest.raises(SpecError) as e:
        tpcw.load_config(write(tmp_path, db_modes))
    assert ": gatekeeper.db_capacity: " in str(e.value) and "calibrate_with" in str(e.value)
    for table in ('db_capacity = "200ms"', 'calibrate_with = "browsers"'):
        tpcw.load_config(write(tmp_path, db_modes + f"\n[gatekeeper]\n{table}\n"))
    # A mode with its own capacity, or a count bound, needs none.
    for own in ('"db:sjf@100ms"', '"db:count:2"'):
        tpcw.load_config(write(tmp_path, BASE.replace('"sjf@auto"', own)))


def test_a_mode_s_own_load_points_must_name_a_listed_mode(tmp_path):
    p = write(tmp_path, BASE + '\n[modes.browsers]\n"sjf-aging:5" = [20]\n')
    with pytest.raises(
        tpcw.SweepConfigError, match=r"modes\.browsers\.sjf-aging:5: expected a mode of modes\.list"
    ):
        tpcw.load_config(p)
    ok = write(tmp_path, BASE + '\n[modes.browsers]\n"sjf-aging:2" = [20]\n')
    assert tpcw.browsers_for(tpcw.load_config(ok), "sjf-aging:2") == [20]


def test_overrides_are_validated_like_the_file(tmp_path):
    p = write(tmp_path, BASE)
    cfg = tpcw.load_config(p, {"browsers": [5], "duration_s": 60.0, "max_queue_wait_s": 0})
    assert cfg["load"]["browsers"] == [5] and cfg["load"]["duration_s"] == 60.0
    with pytest.raises(tpcw.SweepConfigError, match="load.warmup_s"):
        tpcw.load_config(p, {"warmup_s": 90.0})
    with pytest.raises(
        tpcw.SweepConfigError, match=r"bookstore.best_sellers_repeat: expected a value <= 100"
    ):
        tpcw.load_config(p, {"best_sellers_repeat": 101})
