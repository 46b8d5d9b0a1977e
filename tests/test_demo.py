"""`make demo` runs `python -m pymc_dp demo`: its quick mode must run and write the plot."""

from __future__ import annotations

import pytest

from pymc_dp.__main__ import main


@pytest.mark.slow
def test_demo_quick_runs_and_saves_plot(tmp_path, capsys):
    main(["demo", "--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert (tmp_path / "comparison.png").stat().st_size > 10_000
    assert "epsilon" in out and "NUTS" in out  # the privacy report and the comparison


def test_cli_requires_a_command():
    with pytest.raises(SystemExit):
        main([])
