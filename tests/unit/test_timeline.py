import pytest

from tests.conftest import run_cli

EP144_FIVE_STAGE = (
    "--ep 144 --dp 144 --batch 88 --context 4989 --mtp 1 --redundant-experts 32 --overlap five-stage".split()
)


@pytest.mark.parametrize(
    "args,suffix",
    [
        (
            [
                *EP144_FIVE_STAGE,
            ],
            ".png",
        ),
        (
            "--phase prefill --ep 32 --dp 32 --batch 16384 --context 4989 --redundant-experts 32 --overlap two-batch".split(),
            ".svg",
        ),
        (
            "--hardware h100_sxm --ep 128 --dp 128 --batch 128 --context 5000 --mtp 1 --comm pplx".split(),
            ".png",
        ),
    ],
)
def test_timeline_writes_an_image(tmp_path, args, suffix):
    out = tmp_path / f"t{suffix}"
    p = run_cli("timeline", *args, "--out", out)
    assert p.returncode == 0, p.stderr
    assert out.exists() and out.stat().st_size > 5000
    head = out.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in out.read_bytes()[:2000]


def test_timeline_json_has_both_streams(tmp_path):
    import json

    p = run_cli(
        "timeline",
        *EP144_FIVE_STAGE,
        "--out",
        tmp_path / "t.png",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    streams = {e["stream"] for e in d["events"]}
    assert streams == {"compute", "comm"}
    assert d["period_s"] > 0 and d["scheme"] == "five-stage"
