"""docs/update_tour.py: the README's ```bash/```text pairs are found, regenerated with the `⋮` cut kept,
and --check reports without writing (a fake runner stands in for `moesim`)."""

import importlib.util

import pytest

from tests.conftest import ROOT

FENCE = "```"


def _mod():
    spec = importlib.util.spec_from_file_location("update_tour", ROOT / "docs" / "update_tour.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tour = _mod()

TABLE_OLD = ["title", "┏━┓", "│ a │", "│ b │", "   ⋮  (7 more rows)", "└─┘", "footer 1", "footer 2"]
SYNTH = "\n".join(
    [
        "# demo",
        "## Set up",
        f"{FENCE}bash",
        "pip install -e .",
        FENCE,
        "prose, not an output block",
        "## Five-minute tour",
        f"{FENCE}bash",
        "moesim one --x 1 \\",
        "    --y 2",
        "# a comment",
        "moesim two",
        FENCE,
        "",
        f"{FENCE}text",
        "old one",
        "old two",
        FENCE,
        "",
        f"{FENCE}bash",
        "moesim table",
        FENCE,
        f"{FENCE}text",
        *TABLE_OLD,
        FENCE,
        f"{FENCE}python",
        "print(1)",
        FENCE,
        f"{FENCE}text",
        "1",
        FENCE,
        f"{FENCE}bash",
        "moesim sweep",
        FENCE,
        f"{FENCE}text",
        "72 pass the filters in 0.42 s",
        FENCE,
        "",
    ]
)


def fake_runner(outputs):
    calls = []

    def run(command):
        calls.append(command)
        return outputs[command]

    run.calls = calls
    return run


FRESH = {
    "moesim one --x 1 --y 2": "new one   \n",  # rich pads lines: trailing blanks go
    "moesim two": "new two\n\n",
    "moesim table": "\n".join(
        ["title", "┏━┓", *(f"│ r{i} │" for i in range(12)), "└─┘", "footer 1", "footer 2", "footer 3"]
    ),
    "moesim sweep": "72 pass the filters in 0.57 s\n",  # only the timing moved: not a difference
}


def test_pairs_are_bash_blocks_directly_followed_by_text():
    pairs = tour.find_pairs(SYNTH)
    assert [p.commands for p in pairs] == [["moesim one --x 1 --y 2", "moesim two"], ["moesim table"], ["moesim sweep"]]
    assert pairs[0].old == ["old one", "old two"] and pairs[1].old == TABLE_OLD
    assert SYNTH.split("\n")[pairs[0].line - 1] == f"{FENCE}bash"


def test_cut_keeps_head_and_tail_and_recounts():
    new = tour.apply_cut(TABLE_OLD, FRESH["moesim table"].split("\n"))
    # 4 head lines; the tail from the bottom border on, though the footer grew a line; 10 rows omitted
    assert new[:5] == ["title", "┏━┓", "│ r0 │", "│ r1 │", "   ⋮  (10 more rows)"]
    assert new[5:] == ["└─┘", "footer 1", "footer 2", "footer 3"]


def test_cut_by_line_counts_without_a_border():
    old = ["h1", "h2", "⋮ (3 more lines)", "t1"]
    assert tour.apply_cut(old, [f"x{i}" for i in range(8)]) == ["x0", "x1", "⋮ (5 more lines)", "x7"]
    assert tour.apply_cut(old, ["x0", "x1", "x2"]) == ["x0", "x1", "x2"]  # nothing left to cut
    assert tour.apply_cut(["a", "b"], ["c", "d", "e"]) == ["c", "d", "e"]  # no cut: whole output


def test_update_regenerates_blocks_in_place():
    run = fake_runner(FRESH)
    new, changed = tour.update(SYNTH, run)
    assert run.calls == ["moesim one --x 1 --y 2", "moesim two", "moesim table", "moesim sweep"]
    assert [p.commands[0] for p, _ in changed] == ["moesim one --x 1 --y 2", "moesim table"]
    assert f"{FENCE}text\nnew one\nnew two\n{FENCE}" in new
    assert "│ r1 │\n   ⋮  (10 more rows)\n└─┘\nfooter 1\nfooter 2\nfooter 3\n" in new
    assert "in 0.42 s" in new  # timing-only change left alone
    assert "pip install -e .\n```\nprose" in new and "print(1)\n```\n```text\n1\n" in new
    again, changed_again = tour.update(new, fake_runner(FRESH))
    assert again == new and changed_again == []  # idempotent


def test_check_reports_and_writes_nothing(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(SYNTH)
    assert tour.main(["--readme", str(readme), "--check"], run=fake_runner(FRESH)) == 1
    out = capsys.readouterr().out
    assert "README.md:8: output of `moesim one --x 1 --y 2` differs" in out
    assert "moesim table" in out and "moesim sweep" not in out and "2 of 3" in out
    assert readme.read_text() == SYNTH
    assert tour.main(["--readme", str(readme)], run=fake_runner(FRESH)) == 0
    assert readme.read_text() != SYNTH and not list(tmp_path.glob(".README.md.*"))
    assert tour.main(["--readme", str(readme), "--check"], run=fake_runner(FRESH)) == 0


def test_failing_command_writes_nothing(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(SYNTH)

    def run(command):
        if command == "moesim table":
            raise SystemExit(f"update_tour: `{command}` failed (exit 2): error: bad option")
        return FRESH[command]

    with pytest.raises(SystemExit, match="moesim table"):
        tour.main(["--readme", str(readme)], run=run)
    assert readme.read_text() == SYNTH


def test_runner_refuses_other_commands(tmp_path):
    with pytest.raises(SystemExit, match="not a moesim command"):
        tour.moesim_runner(tmp_path)("pip install -e .")


def test_readme_pairs_are_moesim_commands():
    pairs = tour.find_pairs((ROOT / "README.md").read_text())
    assert len(pairs) >= 8
    assert all(c.startswith("moesim ") for p in pairs for c in p.commands)
    assert sum(any("⋮" in ln for ln in p.old) for p in pairs) >= 3
